#include "mqtt_codec.h"
#include "mqtt_wire.h"

#include <cstring>

namespace tb {
namespace mqtt {
using namespace wire;

size_t encode_remaining_length(uint32_t value, uint8_t* out) {
  if (value > kMaxRemainingLength) return 0;
  size_t n = 0;
  do {
    uint8_t digit = static_cast<uint8_t>(value % 128);
    value /= 128;
    if (value > 0) digit |= 0x80;
    out[n++] = digit;
  } while (value > 0);
  return n;
}

Err decode_remaining_length(const uint8_t* in, size_t len, uint32_t* value, size_t* used) {
  uint32_t multiplier = 1;
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (i >= len) return Err::NeedMore;
    v += static_cast<uint32_t>(in[i] & 0x7F) * multiplier;
    if ((in[i] & 0x80) == 0) {
      *value = v;
      *used = i + 1;
      return Err::Ok;
    }
    multiplier *= 128;
  }
  return Err::Malformed;  // continuation bit set on the fourth byte
}

bool valid_utf8_string(const uint8_t* s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t need;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      need = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      need = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      need = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (len - i - 1 < need) return false;
    for (size_t k = 1; k <= need; ++k) {
      uint8_t cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[need]) return false;               // overlong
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // surrogates
    if (cp > 0x10FFFF) return false;
    i += need + 1;
  }
  return true;
}

// encode_connect and encode_publish (3.1.1 and 5) are in mqtt5_codec.cpp.

Err encode_puback(uint16_t packet_id, uint8_t* out, size_t cap, size_t* out_len) {
  if (packet_id == 0) return Err::InvalidArgument;
  Writer w{out, cap};
  w.byte(kPuback << 4);
  w.byte(2);
  w.u16(packet_id);
  return finish(w, out_len);
}

static Err encode_empty(uint8_t type, uint8_t* out, size_t cap, size_t* out_len) {
  Writer w{out, cap};
  w.byte(static_cast<uint8_t>(type << 4));
  w.byte(0);
  return finish(w, out_len);
}

Err encode_pingreq(uint8_t* out, size_t cap, size_t* out_len) { return encode_empty(kPingreq, out, cap, out_len); }
Err encode_pingresp(uint8_t* out, size_t cap, size_t* out_len) {
  return encode_empty(kPingresp, out, cap, out_len);
}
Err encode_disconnect(uint8_t* out, size_t cap, size_t* out_len) {
  return encode_empty(kDisconnect, out, cap, out_len);
}

Err encode_connack(bool session_present, uint8_t return_code, uint8_t* out, size_t cap, size_t* out_len) {
  if (return_code > 5) return Err::InvalidArgument;
  if (return_code != 0 && session_present) return Err::InvalidArgument;  // spec 3.2.2.2
  Writer w{out, cap};
  w.byte(kConnack << 4);
  w.byte(2);
  w.byte(session_present ? 1 : 0);
  w.byte(return_code);
  return finish(w, out_len);
}

Err decode_fixed_header(const uint8_t* in, size_t len, FixedHeader* h) {
  if (len < 1) return Err::NeedMore;
  uint8_t type = in[0] >> 4;
  uint8_t flags = in[0] & 0x0F;
  if (type == 0 || type == 15) return Err::Malformed;  // reserved types
  switch (type) {
    case kPublish:
      if (((flags >> 1) & 0x03) == 3) return Err::Malformed;  // QoS 3 (spec 3.3.1.2)
      break;
    case kPubrel:
    case kSubscribe:
    case kUnsubscribe:
      if (flags != 0x02) return Err::Malformed;
      break;
    default:
      if (flags != 0) return Err::Malformed;
  }
  uint32_t remaining = 0;
  size_t used = 0;
  Err e = decode_remaining_length(in + 1, len - 1, &remaining, &used);
  if (e != Err::Ok) return e;
  h->type = type;
  h->flags = flags;
  h->remaining = remaining;
  h->header_len = 1 + used;
  return Err::Ok;
}

Err decode_connack(const uint8_t* in, size_t len, bool* session_present, uint8_t* return_code) {
  FixedHeader h;
  Err e = whole_packet(in, len, kConnack, &h);
  if (e != Err::Ok) return e;
  if (h.remaining != 2) return Err::Malformed;
  uint8_t ack_flags = in[h.header_len];
  uint8_t rc = in[h.header_len + 1];
  if ((ack_flags & 0xFE) != 0) return Err::Malformed;  // reserved bits 7-1
  if (rc > 5) return Err::Malformed;
  if (rc != 0 && (ack_flags & 1)) return Err::Malformed;
  *session_present = (ack_flags & 1) != 0;
  *return_code = rc;
  return Err::Ok;
}

Err decode_puback(const uint8_t* in, size_t len, uint16_t* packet_id) {
  FixedHeader h;
  Err e = whole_packet(in, len, kPuback, &h);
  if (e != Err::Ok) return e;
  if (h.remaining != 2) return Err::Malformed;
  uint16_t id = static_cast<uint16_t>((in[h.header_len] << 8) | in[h.header_len + 1]);
  if (id == 0) return Err::Malformed;
  *packet_id = id;
  return Err::Ok;
}

static Err decode_empty(const uint8_t* in, size_t len, uint8_t type) {
  FixedHeader h;
  Err e = whole_packet(in, len, type, &h);
  if (e != Err::Ok) return e;
  return h.remaining == 0 ? Err::Ok : Err::Malformed;
}

Err decode_pingresp(const uint8_t* in, size_t len) { return decode_empty(in, len, kPingresp); }
Err decode_pingreq(const uint8_t* in, size_t len) { return decode_empty(in, len, kPingreq); }
Err decode_disconnect(const uint8_t* in, size_t len) { return decode_empty(in, len, kDisconnect); }

Err decode_publish(const uint8_t* in, size_t len, PublishView* out) {
  FixedHeader h;
  Err e = whole_packet(in, len, kPublish, &h);
  if (e != Err::Ok) return e;
  const uint8_t* p = in + h.header_len;
  const uint8_t* end = p + h.remaining;
  uint8_t qos = (h.flags >> 1) & 0x03;
  bool dup = (h.flags & 0x08) != 0;
  if (qos == 0 && dup) return Err::Malformed;
  const uint8_t* topic = nullptr;
  uint16_t topic_len = 0;
  if (!read_field(p, end, &topic, &topic_len)) return Err::Malformed;
  if (topic_len == 0 || !valid_utf8_string(topic, topic_len)) return Err::Malformed;
  if (has_wildcard(reinterpret_cast<const char*>(topic), topic_len)) return Err::Malformed;
  uint16_t id = 0;
  if (qos > 0) {
    if (!read_u16(p, end, &id) || id == 0) return Err::Malformed;
  }
  out->topic = reinterpret_cast<const char*>(topic);
  out->topic_len = topic_len;
  out->qos = qos;
  out->retain = (h.flags & 0x01) != 0;
  out->dup = dup;
  out->packet_id = id;
  out->payload = p;
  out->payload_len = static_cast<size_t>(end - p);
  return Err::Ok;
}

Err decode_connect(const uint8_t* in, size_t len, ConnectView* out) {
  FixedHeader h;
  Err e = whole_packet(in, len, kConnect, &h);
  if (e != Err::Ok) return e;
  const uint8_t* p = in + h.header_len;
  const uint8_t* end = p + h.remaining;
  const uint8_t* name = nullptr;
  uint16_t name_len = 0;
  if (!read_field(p, end, &name, &name_len)) return Err::Malformed;
  if (name_len != 4 || memcmp(name, "MQTT", 4) != 0) return Err::Malformed;
  if (end - p < 4) return Err::Malformed;
  uint8_t level = *p++;
  if (level != 4) return Err::Protocol;
  uint8_t flags = *p++;
  if (flags & 0x01) return Err::Malformed;  // reserved flag (3.1.2.3)
  if (flags & 0x04) return Err::Protocol;   // will messages are not supported by this decoder
  if (flags & 0x38) return Err::Malformed;  // will QoS / retain without will flag
  bool has_user = (flags & 0x80) != 0;
  bool has_pass = (flags & 0x40) != 0;
  if (has_pass && !has_user) return Err::Malformed;
  uint16_t keepalive = 0;
  if (!read_u16(p, end, &keepalive)) return Err::Malformed;
  const uint8_t* cid = nullptr;
  uint16_t cid_len = 0;
  if (!read_field(p, end, &cid, &cid_len) || !valid_utf8_string(cid, cid_len)) return Err::Malformed;
  const uint8_t* user = nullptr;
  uint16_t user_len = 0;
  if (has_user && (!read_field(p, end, &user, &user_len) || !valid_utf8_string(user, user_len))) {
    return Err::Malformed;
  }
  const uint8_t* pass = nullptr;
  uint16_t pass_len = 0;
  if (has_pass && !read_field(p, end, &pass, &pass_len)) return Err::Malformed;
  if (p != end) return Err::Malformed;
  out->client_id = reinterpret_cast<const char*>(cid);
  out->client_id_len = cid_len;
  out->username = reinterpret_cast<const char*>(user);
  out->username_len = user_len;
  out->password = pass;
  out->password_len = pass_len;
  out->keepalive_s = keepalive;
  out->clean_session = (flags & 0x02) != 0;
  out->has_username = has_user;
  out->has_password = has_pass;
  return Err::Ok;
}

const char* connack_reason(uint8_t rc) {
  switch (rc) {
    case 0: return "connection accepted";
    case 1: return "unacceptable protocol version";
    case 2: return "identifier rejected";
    case 3: return "server unavailable";
    case 4: return "bad user name or password";
    case 5: return "not authorized";
    default: return "invalid return code";
  }
}

}  // namespace mqtt
}  // namespace tb
