// CONNECT and PUBLISH of MQTT 3.1.1 and 5, the acknowledgements of QoS 1 and 2 (PUBACK, PUBREC,
// PUBREL, PUBCOMP) with MQTT 5 reason codes, the MQTT 5 CONNACK with its properties, the broker's
// MQTT 5 DISCONNECT, and the reason code names (MQTT 5.0 sections 2.4, 2.2.2, 3.1-3.7, 3.14).
#include <cstring>

#include "mqtt_codec.h"
#include "mqtt_wire.h"

namespace tb {
namespace mqtt {
using namespace wire;

namespace {

// One property of an MQTT 5 property list: its identifier and value (an integer, or bytes).
struct Property {
  uint8_t id = 0;
  uint32_t value = 0;
  const uint8_t* data = nullptr;
  uint16_t len = 0;
};

// Reads the property at p (inside [p, end)); false when it is malformed or unknown (2.2.2.2).
bool read_property(const uint8_t*& p, const uint8_t* end, Property* prop) {
  if (p >= end) return false;
  prop->id = *p++;
  const uint8_t* skip = nullptr;
  uint16_t skip_len = 0;
  switch (prop->id) {
    case 0x01: case 0x17: case 0x19: case 0x24: case 0x25: case 0x28: case 0x29: case 0x2A:
      if (p >= end) return false;
      prop->value = *p++;
      return true;
    case 0x13: case 0x21: case 0x22: case 0x23: {
      uint16_t v = 0;
      if (!read_u16(p, end, &v)) return false;
      prop->value = v;
      return true;
    }
    case 0x02: case 0x11: case 0x18: case 0x27:
      if (end - p < 4) return false;
      prop->value = (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
                    (static_cast<uint32_t>(p[2]) << 8) | p[3];
      p += 4;
      return true;
    case 0x0B: {
      size_t used = 0;
      if (decode_remaining_length(p, static_cast<size_t>(end - p), &prop->value, &used) != Err::Ok) return false;
      p += used;
      return true;
    }
    case 0x03: case 0x08: case 0x09: case 0x12: case 0x15: case 0x16: case 0x1A: case 0x1C: case 0x1F:
      return read_field(p, end, &prop->data, &prop->len);
    case 0x26:  // user property: a string pair
      return read_field(p, end, &skip, &skip_len) && read_field(p, end, &prop->data, &prop->len);
    default:
      return false;
  }
}

// The property list at p: its length (a Variable Byte Integer), then the properties; *end_out = its end.
bool property_span(const uint8_t*& p, const uint8_t* end, const uint8_t** end_out) {
  uint32_t n = 0;
  size_t used = 0;
  if (decode_remaining_length(p, static_cast<size_t>(end - p), &n, &used) != Err::Ok) return false;
  p += used;
  if (static_cast<uint32_t>(end - p) < n) return false;
  *end_out = p + n;
  return true;
}

bool is_ack(uint8_t type) { return type == kPuback || type == kPubrec || type == kPubrel || type == kPubcomp; }

}  // namespace

Err encode_connect(const ConnectOptions& opt, uint8_t* out, size_t cap, size_t* out_len) {
  if (opt.client_id == nullptr) return Err::InvalidArgument;
  if (opt.level != kLevel311 && opt.level != kLevel5) return Err::InvalidArgument;
  size_t cid_len = 0, user_len = 0, pass_len = 0;
  if (!valid_str(opt.client_id, &cid_len)) return Err::InvalidArgument;
  if (cid_len == 0 && !opt.clean_session) return Err::InvalidArgument;  // 3.1.1: 3.1.3.1
  if (opt.level == kLevel311 && opt.password != nullptr && opt.username == nullptr) {
    return Err::InvalidArgument;  // 3.1.1: 3.1.2.9 (MQTT 5 allows a password alone)
  }
  if (opt.username != nullptr && !valid_str(opt.username, &user_len)) return Err::InvalidArgument;
  if (opt.password != nullptr) {
    pass_len = strlen(opt.password);  // binary data, no UTF-8 rule
    if (pass_len > 0xFFFF) return Err::InvalidArgument;
  }
  uint8_t flags = 0;
  if (opt.clean_session) flags |= 0x02;
  if (opt.username != nullptr) flags |= 0x80;
  if (opt.password != nullptr) flags |= 0x40;
  const bool v5 = opt.level == kLevel5;
  const uint32_t props = (v5 && opt.session_expiry_s != 0) ? 5 : 0;
  uint32_t remaining = 10 + (v5 ? 1 + props : 0) + 2 + static_cast<uint32_t>(cid_len);
  if (opt.username != nullptr) remaining += 2 + static_cast<uint32_t>(user_len);
  if (opt.password != nullptr) remaining += 2 + static_cast<uint32_t>(pass_len);

  Writer w{out, cap};
  if (!write_fixed_header(w, kConnect << 4, remaining)) return Err::BufferTooSmall;
  w.str("MQTT", 4);
  w.byte(opt.level);
  w.byte(flags);
  w.u16(opt.keepalive_s);
  if (v5) {
    w.varint(props);
    if (props != 0) {
      w.byte(0x11);  // Session Expiry Interval
      w.u32(opt.session_expiry_s);
    }
  }
  w.str(opt.client_id, cid_len);
  if (opt.username != nullptr) w.str(opt.username, user_len);
  if (opt.password != nullptr) w.str(opt.password, pass_len);
  return finish(w, out_len);
}

Err encode_publish(const char* topic, const uint8_t* payload, size_t payload_len, uint8_t qos,
                   uint16_t packet_id, bool retain, bool dup, uint8_t* out, size_t cap, size_t* out_len) {
  PublishOptions o;
  o.qos = qos;
  o.packet_id = packet_id;
  o.retain = retain;
  o.dup = dup;
  return encode_publish(topic, payload, payload_len, o, out, cap, out_len);
}

Err encode_publish(const char* topic, const uint8_t* payload, size_t payload_len, const PublishOptions& o,
                   uint8_t* out, size_t cap, size_t* out_len) {
  if (topic == nullptr || (payload == nullptr && payload_len > 0)) return Err::InvalidArgument;
  if (o.qos > 2) return Err::InvalidArgument;
  if (o.qos == 0 && (o.packet_id != 0 || o.dup)) return Err::InvalidArgument;  // 2.3.1, 3.3.1.1
  if (o.qos > 0 && o.packet_id == 0) return Err::InvalidArgument;
  const bool v5 = o.level == kLevel5;
  if (!v5 && (o.level != kLevel311 || o.topic_alias != 0)) return Err::InvalidArgument;
  size_t topic_len = 0;
  if (!valid_str(topic, &topic_len)) return Err::InvalidArgument;
  if (topic_len == 0 && o.topic_alias == 0) return Err::InvalidArgument;  // 4.7.3; MQTT 5 3.3.2.3.4
  if (has_wildcard(topic, topic_len)) return Err::InvalidArgument;       // 3.3.2.1
  const uint32_t props = o.topic_alias != 0 ? 3 : 0;
  uint64_t remaining = 2 + static_cast<uint64_t>(topic_len) + (o.qos > 0 ? 2 : 0) + (v5 ? 1 + props : 0) + payload_len;
  if (remaining > kMaxRemainingLength) return Err::InvalidArgument;
  uint8_t first = static_cast<uint8_t>((kPublish << 4) | (o.dup ? 0x08 : 0) | (o.qos << 1) | (o.retain ? 1 : 0));
  Writer w{out, cap};
  if (!write_fixed_header(w, first, static_cast<uint32_t>(remaining))) return Err::BufferTooSmall;
  w.str(topic, topic_len);
  if (o.qos > 0) w.u16(o.packet_id);
  if (v5) {
    w.varint(props);
    if (o.topic_alias != 0) {
      w.byte(0x23);  // Topic Alias
      w.u16(o.topic_alias);
    }
  }
  w.bytes(payload, payload_len);
  return finish(w, out_len);
}

Err encode_ack(uint8_t type, uint16_t packet_id, uint8_t level, uint8_t reason, uint8_t* out, size_t cap,
               size_t* out_len) {
  if (!is_ack(type) || packet_id == 0) return Err::InvalidArgument;
  if (reason != 0 && level != kLevel5) return Err::InvalidArgument;
  Writer w{out, cap};
  w.byte(static_cast<uint8_t>((type << 4) | (type == kPubrel ? 0x02 : 0)));
  w.byte(reason != 0 ? 3 : 2);
  w.u16(packet_id);
  if (reason != 0) w.byte(reason);
  return finish(w, out_len);
}

Err decode_ack(const uint8_t* in, size_t len, uint8_t level, AckView* out) {
  FixedHeader h;
  if (len < 1 || !is_ack(in[0] >> 4)) return Err::Malformed;
  Err e = whole_packet(in, len, in[0] >> 4, &h);
  if (e != Err::Ok) return e;
  if (h.remaining < 2 || (level != kLevel5 && h.remaining != 2)) return Err::Malformed;
  const uint8_t* p = in + h.header_len;
  const uint8_t* end = p + h.remaining;
  uint16_t id = 0;
  read_u16(p, end, &id);
  if (id == 0) return Err::Malformed;
  uint8_t reason = 0;
  if (p < end) reason = *p++;
  if (p < end) {  // MQTT 5: properties (reason string, user properties): checked, not kept
    const uint8_t* pend = nullptr;
    if (!property_span(p, end, &pend) || pend != end) return Err::Malformed;
    Property prop;
    while (p < pend) {
      if (!read_property(p, pend, &prop)) return Err::Malformed;
    }
  }
  out->type = h.type;
  out->packet_id = id;
  out->reason = reason;
  return Err::Ok;
}

static bool apply_connack_property(const Property& prop, ConnackView* out) {
  switch (prop.id) {
    case 0x21: out->receive_maximum = static_cast<uint16_t>(prop.value); return prop.value != 0;
    case 0x22: out->topic_alias_maximum = static_cast<uint16_t>(prop.value); return true;
    case 0x24: out->maximum_qos = static_cast<uint8_t>(prop.value); return prop.value <= 1;
    case 0x11:
      out->has_session_expiry = true;
      out->session_expiry_s = prop.value;
      return true;
    case 0x1F:
      out->reason_string = reinterpret_cast<const char*>(prop.data);
      out->reason_string_len = prop.len;
      return true;
    default: return true;
  }
}

Err decode_connack(const uint8_t* in, size_t len, uint8_t level, ConnackView* out) {
  *out = ConnackView();
  if (level != kLevel5) return decode_connack(in, len, &out->session_present, &out->code);
  FixedHeader h;
  Err e = whole_packet(in, len, kConnack, &h);
  if (e != Err::Ok) return e;
  const uint8_t* p = in + h.header_len;
  const uint8_t* end = p + h.remaining;
  if (h.remaining < 2) return Err::Malformed;
  const uint8_t ack_flags = *p++;
  out->code = *p++;
  if ((ack_flags & 0xFE) != 0) return Err::Malformed;
  if (out->code >= 0x80 && (ack_flags & 1)) return Err::Malformed;  // 3.2.2.1.1
  out->session_present = (ack_flags & 1) != 0;
  if (p == end) return Err::Ok;
  const uint8_t* pend = nullptr;
  if (!property_span(p, end, &pend) || pend != end) return Err::Malformed;
  Property prop;
  while (p < pend) {
    if (!read_property(p, pend, &prop) || !apply_connack_property(prop, out)) return Err::Malformed;
  }
  return Err::Ok;
}

Err decode_disconnect5(const uint8_t* in, size_t len, uint8_t* reason, const char** text, uint16_t* text_len) {
  FixedHeader h;
  Err e = whole_packet(in, len, kDisconnect, &h);
  if (e != Err::Ok) return e;
  const uint8_t* p = in + h.header_len;
  const uint8_t* end = p + h.remaining;
  *reason = p < end ? *p++ : 0;
  *text = nullptr;
  *text_len = 0;
  if (p == end) return Err::Ok;
  const uint8_t* pend = nullptr;
  if (!property_span(p, end, &pend) || pend != end) return Err::Malformed;
  Property prop;
  while (p < pend) {
    if (!read_property(p, pend, &prop)) return Err::Malformed;
    if (prop.id == 0x1F) {
      *text = reinterpret_cast<const char*>(prop.data);
      *text_len = prop.len;
    }
  }
  return Err::Ok;
}

const char* reason_name(uint8_t code) {
  switch (code) {
    case 0x00: return "Success";
    case 0x04: return "Disconnect with Will Message";
    case 0x10: return "No matching subscribers";
    case 0x80: return "Unspecified error";
    case 0x81: return "Malformed Packet";
    case 0x82: return "Protocol Error";
    case 0x83: return "Implementation specific error";
    case 0x84: return "Unsupported Protocol Version";
    case 0x85: return "Client Identifier not valid";
    case 0x86: return "Bad User Name or Password";
    case 0x87: return "Not authorized";
    case 0x88: return "Server unavailable";
    case 0x89: return "Server busy";
    case 0x8A: return "Banned";
    case 0x8B: return "Server shutting down";
    case 0x8C: return "Bad authentication method";
    case 0x8D: return "Keep Alive timeout";
    case 0x8E: return "Session taken over";
    case 0x90: return "Topic Name invalid";
    case 0x91: return "Packet Identifier in use";
    case 0x92: return "Packet Identifier not found";
    case 0x93: return "Receive Maximum exceeded";
    case 0x94: return "Topic Alias invalid";
    case 0x95: return "Packet too large";
    case 0x96: return "Message rate too high";
    case 0x97: return "Quota exceeded";
    case 0x98: return "Administrative action";
    case 0x99: return "Payload format invalid";
    case 0x9A: return "Retain not supported";
    case 0x9B: return "QoS not supported";
    case 0x9C: return "Use another server";
    case 0x9D: return "Server moved";
    case 0x9F: return "Connection rate exceeded";
    default: return "unknown reason code";
  }
}

}  // namespace mqtt
}  // namespace tb
