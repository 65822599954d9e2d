// Clock over CLOCK_MONOTONIC / CLOCK_REALTIME with absolute sleeps (no drift).
#pragma once

#include "clock.h"

namespace vdev {

class PosixClock : public tb::Clock {
 public:
  int64_t mono_us() override;
  int64_t wall_us() override;
  void sleep_until_mono_us(int64_t t) override;
};

}  // namespace vdev
