// The sensor payload: a JSON object of EXACTLY the requested size.
//   {"d":"<device>","n":<seq>,"t":<send time us>,"s":[<flame d>,<flame a>,<mq2 a>,<mq2 ppm>],"x":"<filler>"}
// Keys are an interface (subscriber and analysis parse them). Padding of 1..6 bytes, too small
// for the filler field, is written as spaces before the closing brace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_options.h"
#include "tb_error.h"

namespace tb {

constexpr size_t kMaxPayload = opt::spec(opt::Id::payload).max;  // device_options.def
constexpr size_t kMaxDeviceId = 32;
constexpr int64_t kMaxTimestampUs = 9999999999999999LL;  // 16 digits: until the year 2286
constexpr uint16_t kMaxAnalog = 4095;                    // 12-bit ADC
constexpr uint16_t kMaxPpm = 9999;

struct SensorReading {
  uint8_t flame_digital = 0;  // 0 or 1
  uint16_t flame_analog = 0;  // 0..4095
  uint16_t mq2_analog = 0;    // 0..4095
  uint16_t mq2_ppm = 0;       // 0..9999
};

// True when id is 1..kMaxDeviceId characters of [A-Za-z0-9_.-] (needs no JSON escaping).
bool valid_device_id(const char* id);

// Smallest payload that fits every message of a run of `samples` messages
// (worst-case widths: digits of samples-1, 16-digit timestamp, 4-digit readings).
size_t payload_min_size(const char* device_id, uint32_t samples);

// Checks P against the minimum and kMaxPayload; the error text names the minimum.
Err payload_check_size(const char* device_id, uint32_t samples, size_t size, ErrorText* err);

// Writes exactly `size` bytes (plus a NUL at out[size], so cap must exceed size).
Err payload_encode(const char* device_id, uint32_t seq, int64_t t_send_us, const SensorReading& s,
                   size_t size, char* out, size_t cap, ErrorText* err);

}  // namespace tb
