#include "payload.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace tb {
namespace {

constexpr size_t kFillerOverhead = 7;  // ,"x":"  +  closing quote

size_t decimal_digits(uint64_t v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

}  // namespace

bool valid_device_id(const char* id) {
  if (id == nullptr) return false;
  size_t n = strlen(id);
  if (n == 0 || n > kMaxDeviceId) return false;
  for (size_t i = 0; i < n; ++i) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

size_t payload_min_size(const char* device_id, uint32_t samples) {
  uint32_t last = samples > 0 ? samples - 1 : 0;
  // {"d":"ID","n":SEQ,"t":T,"s":[F,A,A,P]}
  return strlen("{\"d\":\"") + strlen(device_id) + strlen("\",\"n\":") + decimal_digits(last) +
         strlen(",\"t\":") + decimal_digits(kMaxTimestampUs) + strlen(",\"s\":[") + 1 + 1 +
         decimal_digits(kMaxAnalog) + 1 + decimal_digits(kMaxAnalog) + 1 + decimal_digits(kMaxPpm) +
         strlen("]}");
}

Err payload_check_size(const char* device_id, uint32_t samples, size_t size, ErrorText* err) {
  if (!valid_device_id(device_id)) {
    err->set("device id must be 1..%u characters of A-Z a-z 0-9 _ . -", static_cast<unsigned>(kMaxDeviceId));
    return Err::InvalidArgument;
  }
  if (samples == 0) {
    err->set("samples must be at least 1");
    return Err::InvalidArgument;
  }
  size_t min = payload_min_size(device_id, samples);
  if (size < min) {
    err->set("payload of %u bytes is below the minimum of %u bytes for device id \"%s\" and %" PRIu32
             " samples",
             static_cast<unsigned>(size), static_cast<unsigned>(min), device_id, samples);
    return Err::PayloadTooSmall;
  }
  if (size > kMaxPayload) {
    err->set("payload of %u bytes is above the maximum of %u bytes", static_cast<unsigned>(size),
             static_cast<unsigned>(kMaxPayload));
    return Err::PayloadTooLarge;
  }
  return Err::Ok;
}

Err payload_encode(const char* device_id, uint32_t seq, int64_t t_send_us, const SensorReading& s,
                   size_t size, char* out, size_t cap, ErrorText* err) {
  if (!valid_device_id(device_id)) {
    err->set("invalid device id");
    return Err::InvalidArgument;
  }
  if (t_send_us < 0 || t_send_us > kMaxTimestampUs) {
    err->set("send time %" PRId64 " us is outside 0..%" PRId64, t_send_us, kMaxTimestampUs);
    return Err::InvalidArgument;
  }
  if (s.flame_digital > 1 || s.flame_analog > kMaxAnalog || s.mq2_analog > kMaxAnalog || s.mq2_ppm > kMaxPpm) {
    err->set("sensor reading out of range (flame %u/%u, mq2 %u/%u ppm)", s.flame_digital, s.flame_analog,
             s.mq2_analog, s.mq2_ppm);
    return Err::InvalidArgument;
  }
  if (size > kMaxPayload || cap <= size) {
    err->set("payload buffer of %u bytes cannot hold %u bytes", static_cast<unsigned>(cap),
             static_cast<unsigned>(size));
    return Err::BufferTooSmall;
  }
  int n = snprintf(out, cap, "{\"d\":\"%s\",\"n\":%" PRIu32 ",\"t\":%" PRId64 ",\"s\":[%u,%u,%u,%u]", device_id,
                   seq, t_send_us, static_cast<unsigned>(s.flame_digital), static_cast<unsigned>(s.flame_analog),
                   static_cast<unsigned>(s.mq2_analog), static_cast<unsigned>(s.mq2_ppm));
  if (n < 0) {
    err->set("payload formatting failed");
    return Err::InvalidArgument;
  }
  size_t body = static_cast<size_t>(n) + 1;  // + closing brace
  if (body > size) {
    err->set("payload of %u bytes is too small for message %" PRIu32 " (needs %u bytes)",
             static_cast<unsigned>(size), seq, static_cast<unsigned>(body));
    return Err::PayloadTooSmall;
  }
  size_t pos = static_cast<size_t>(n);
  size_t pad = size - body;
  if (pad >= kFillerOverhead) {
    memcpy(out + pos, ",\"x\":\"", 6);
    pos += 6;
    size_t xs = pad - kFillerOverhead;
    memset(out + pos, 'x', xs);
    pos += xs;
    out[pos++] = '"';
  } else {
    memset(out + pos, ' ', pad);
    pos += pad;
  }
  out[pos++] = '}';
  out[pos] = '\0';
  return Err::Ok;
}

}  // namespace tb
