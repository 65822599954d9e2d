// The MQTT codec's internal helpers (mqtt_codec.cpp, mqtt5_codec.cpp): a bounded writer, the fixed
// header, u16 fields and the one-whole-packet check. Not part of the core's interface.
#pragma once

#include <cstring>

#include "mqtt_codec.h"

namespace tb {
namespace mqtt {
namespace wire {

// Sequential writer over a fixed buffer; any overflow sets ok = false.
struct Writer {
  Writer(uint8_t* o, size_t c) : out(o), cap(c) {}
  uint8_t* out;
  size_t cap;
  size_t pos = 0;
  bool ok = true;

  void byte(uint8_t b) {
    if (pos >= cap) {
      ok = false;
      return;
    }
    out[pos++] = b;
  }
  void u16(uint16_t v) {
    byte(static_cast<uint8_t>(v >> 8));
    byte(static_cast<uint8_t>(v & 0xFF));
  }
  void bytes(const uint8_t* p, size_t n) {
    if (n > cap - pos || pos > cap) {
      ok = false;
      return;
    }
    if (n > 0) memcpy(out + pos, p, n);
    pos += n;
  }
  void u32(uint32_t v) {
    u16(static_cast<uint16_t>(v >> 16));
    u16(static_cast<uint16_t>(v & 0xFFFF));
  }
  void varint(uint32_t v) {  // a Variable Byte Integer (MQTT 5 1.5.5), v <= kMaxRemainingLength
    uint8_t b[4];
    size_t n = encode_remaining_length(v, b);
    if (n == 0) ok = false;
    bytes(b, n);
  }
  void str(const char* s, size_t n) {
    u16(static_cast<uint16_t>(n));
    bytes(reinterpret_cast<const uint8_t*>(s), n);
  }
};

// Writes fixed header byte + remaining length; returns false when it does not fit.
inline bool write_fixed_header(Writer& w, uint8_t first, uint32_t remaining) {
  uint8_t rl[4];
  size_t n = encode_remaining_length(remaining, rl);
  if (n == 0) return false;
  w.byte(first);
  w.bytes(rl, n);
  return w.ok;
}

inline Err finish(const Writer& w, size_t* out_len) {
  if (!w.ok) return Err::BufferTooSmall;
  *out_len = w.pos;
  return Err::Ok;
}

// Reads a u16-length-prefixed field inside [p, end).
inline bool read_u16(const uint8_t*& p, const uint8_t* end, uint16_t* v) {
  if (end - p < 2) return false;
  *v = static_cast<uint16_t>((p[0] << 8) | p[1]);
  p += 2;
  return true;
}

inline bool read_field(const uint8_t*& p, const uint8_t* end, const uint8_t** data, uint16_t* n) {
  if (!read_u16(p, end, n)) return false;
  if (end - p < *n) return false;
  *data = p;
  p += *n;
  return true;
}

// Decodes the fixed header and checks that the buffer holds exactly that one packet.
inline Err whole_packet(const uint8_t* in, size_t len, uint8_t type, FixedHeader* h) {
  Err e = decode_fixed_header(in, len, h);
  if (e == Err::NeedMore) return Err::Malformed;  // the caller promised a complete packet
  if (e != Err::Ok) return e;
  if (h->type != type) return Err::Malformed;
  if (h->header_len + h->remaining != len) return Err::Malformed;
  return Err::Ok;
}

// s is a UTF-8 string without U+0000 (1.5.3) and at most 65535 bytes; its length in *n.
inline bool valid_str(const char* s, size_t* n) {
  *n = strlen(s);
  return *n <= 0xFFFF && valid_utf8_string(reinterpret_cast<const uint8_t*>(s), *n);
}

inline bool has_wildcard(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == '+' || s[i] == '#') return true;
  }
  return false;
}

}  // namespace wire
}  // namespace mqtt
}  // namespace tb
