-- MQTT inside WebSocket frames for tshark (orchestrator/backends/tshark.py, a websocket cell's export): the
-- WebSocket dissector hands a binary frame to the dissector its negotiated subprotocol names in the table
-- ws.protocol, and Wireshark 4.0 (Debian 12's) registers none for "mqtt". Where one is registered already, it stays.
local protocols = DissectorTable.get("ws.protocol")
if protocols:get_dissector("mqtt") == nil then
  protocols:add("mqtt", Dissector.get("mqtt"))
end
