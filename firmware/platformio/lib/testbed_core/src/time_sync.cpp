#include "time_sync.h"

#include <cstring>

namespace tb {
namespace timesync_wire {
namespace {

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

void put_i64(uint8_t* p, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(u >> (56 - 8 * i));
}

uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}

int64_t get_i64(const uint8_t* p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);  // two's complement (C++20 defines it; every C++17 target does it)
}

void encode(uint8_t kind, uint16_t flags, uint32_t seq, int64_t t1, int64_t t2, int64_t t3, uint8_t* out) {
  memcpy(out, kMagic, sizeof(kMagic));
  out[4] = kVersion;
  out[5] = kind;
  put_u16(out + 6, flags);
  put_u32(out + 8, seq);
  put_u32(out + 12, 0);
  put_i64(out + 16, t1);
  put_i64(out + 24, t2);
  put_i64(out + 32, t3);
}

}  // namespace

void encode_request(uint32_t seq, int64_t t1_us, uint8_t out[kSize]) {
  encode(kKindRequest, 0, seq, t1_us, 0, 0, out);
}

void encode_reply(const Reply& r, uint8_t out[kSize]) {
  encode(kKindReply, r.flags, r.seq, r.t1_us, r.t2_us, r.t3_us, out);
}

Err decode_reply(const uint8_t* data, size_t len, Reply* out) {
  if (data == nullptr || out == nullptr) return Err::InvalidArgument;
  if (len != kSize || memcmp(data, kMagic, sizeof(kMagic)) != 0) return Err::Malformed;
  if (data[4] != kVersion) return Err::Protocol;
  if (data[5] != kKindReply) return Err::Malformed;
  Reply r;
  r.flags = get_u16(data + 6);
  r.seq = get_u32(data + 8);
  r.t1_us = get_i64(data + 16);
  r.t2_us = get_i64(data + 24);
  r.t3_us = get_i64(data + 32);
  if (r.t3_us < r.t2_us) return Err::Malformed;
  *out = r;
  return Err::Ok;
}

}  // namespace timesync_wire

namespace {

// One exchange. Ok with *taken = false when the reply was lost (or the board clock stepped back).
Err exchange(Datagram& d, Clock& clock, uint32_t seq, TimeSample* sample, bool* taken) {
  namespace w = timesync_wire;
  *taken = false;
  uint8_t request[w::kSize];
  const int64_t t1 = clock.wall_us();
  w::encode_request(seq, t1, request);
  Err e = d.send(request, sizeof(request));
  if (e != Err::Ok) return e;
  const int64_t deadline = clock.mono_us() + static_cast<int64_t>(kTimeSyncReplyTimeoutMs) * 1000;
  uint8_t buf[w::kSize + 8];  // a longer datagram arrives truncated and is refused by its size
  while (true) {
    const int64_t left_us = deadline - clock.mono_us();
    if (left_us <= 0) return Err::Ok;
    size_t len = 0;
    e = d.recv(buf, sizeof(buf), &len, static_cast<uint32_t>((left_us + 999) / 1000));
    const int64_t t4 = clock.wall_us();  // first thing after the datagram is in
    if (e == Err::RecvTimeout) return Err::Ok;
    if (e != Err::Ok) return e;
    w::Reply r;
    if (w::decode_reply(buf, len, &r) != Err::Ok) continue;  // garbage or another protocol
    if (r.seq != seq || r.t1_us != t1) continue;             // stale, duplicate or not ours
    if (t4 < t1) return Err::Ok;                             // the board clock stepped back
    *sample = TimeSample{t1, r.t2_us, r.t3_us, t4};
    *taken = true;
    return Err::Ok;
  }
}

}  // namespace

Err time_sync(Datagram& d, Clock& clock, const char* host, uint16_t port, uint32_t count, TimeSample* out,
              uint32_t* got) {
  if (got != nullptr) *got = 0;
  if (host == nullptr || out == nullptr || got == nullptr || count == 0) return Err::InvalidArgument;
  Err e = d.open(host, port);
  for (uint32_t i = 0; e == Err::Ok && i < count; ++i) {
    if (i > 0) clock.sleep_until_mono_us(clock.mono_us() + static_cast<int64_t>(kTimeSyncGapMs) * 1000);
    bool taken = false;
    e = exchange(d, clock, i, &out[*got], &taken);
    if (taken) ++*got;
  }
  d.close();
  if (e != Err::Ok) return e;
  return *got == 0 ? Err::TimeSyncNoReply : Err::Ok;
}

}  // namespace tb
