// The connection lifecycle of a run, a measured axis of the study: how a sensor's MQTT connections
// come and go (one for the whole run, or one every K messages with a full or a resumed TLS
// handshake), and how each one ends (MQTT DISCONNECT + TLS close_notify, or dropped as by a power loss).
#pragma once

#include <cstdint>

namespace tb {

enum class ConnectionMode : uint8_t {
  Persistent,    // one connection for the whole run (the default)
  Reconnect,     // a new connection every K messages; every TLS handshake full
  ResumeId,      // like Reconnect; TLS 1.2 resumption by session ID (client session tickets disabled)
  ResumeTicket,  // like Reconnect; TLS 1.2 resumption by session ticket (RFC 5077)
};

enum class CloseMode : uint8_t {
  Disconnect,  // MQTT DISCONNECT, wait for the broker's close, TLS close_notify
  Drop,        // a sensor losing power: no DISCONNECT, no close_notify, the socket is just closed
};

// What a TLS transport is asked to do with the session of one connection for the next one.
enum class SessionResumption : uint8_t {
  None,       // mbedTLS client defaults (tickets enabled), nothing offered: every handshake full
  SessionId,  // tickets disabled; the last session offered by its ID
  Ticket,     // tickets enabled; the last session (with its ticket) offered
};

// What a device does when a connection is lost or cannot be opened (issue 27: reconnect storms).
enum class ReconnectPolicy : uint8_t {
  Off,        // as before: a persistent session reopens every 200 ms; a clean session's run ends on a loss
  Immediate,  // every lost or refused connection is opened again at once, then every 200 ms while refused
  Backoff,    // exponential backoff with full jitter: attempt n waits uniform [0, min(cap, base x 2^n)),
              // seeded per device (the AWS Architecture Blog's "full jitter", as MQTT clients do)
};

// "persistent", "reconnect", "resume-id", "resume-ticket"
const char* connection_mode_name(ConnectionMode m);
// "disconnect", "drop"
const char* close_mode_name(CloseMode c);
// false for anything but the names above (exact, lower case)
bool parse_connection_mode(const char* name, ConnectionMode* out);
bool parse_close_mode(const char* name, CloseMode* out);
SessionResumption resumption_for(ConnectionMode m);
// "off", "immediate", "backoff"
const char* reconnect_policy_name(ReconnectPolicy p);
bool parse_reconnect_policy(const char* name, ReconnectPolicy* out);
// The pause before reconnection attempt `attempt` (0: the first after the loss); rng: the device's
// splitmix64 state (Backoff only draws from it).
uint64_t reconnect_pause_us(ReconnectPolicy p, uint32_t base_ms, uint32_t cap_ms, uint32_t attempt, uint64_t* rng);

// When message `seq` is due, from the run's t0: seq x interval, except that a lifecycle that reconnects
// with a sleep (sleep_us > 0) has each connection's first message due sleep_us after the previous
// connection's last (connection c = seq / K starts at c x ((K - 1) x interval + sleep)).
int64_t scheduled_offset_us(ConnectionMode m, uint32_t per_connection, uint64_t interval_us, uint64_t sleep_us,
                            uint32_t seq);

}  // namespace tb
