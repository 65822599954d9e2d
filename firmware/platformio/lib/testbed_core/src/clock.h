// Time source injected into the core (POSIX clocks on the host, esp_timer + SNTP time on the ESP32).
#pragma once

#include <cstdint>

namespace tb {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic microseconds (arbitrary origin) for intervals and the publish schedule.
  virtual int64_t mono_us() = 0;
  // Wall-clock microseconds since the Unix epoch (the payload's "t").
  virtual int64_t wall_us() = 0;
  // Sleeps until mono_us() >= t (returns at once when t has passed).
  virtual void sleep_until_mono_us(int64_t t) = 0;
};

}  // namespace tb
