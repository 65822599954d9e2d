// Clock over CLOCK_MONOTONIC / CLOCK_REALTIME with absolute sleeps (no drift).
#pragma once

#include <csignal>

#include "clock.h"

namespace vdev {

class PosixClock : public tb::Clock {
 public:
  // A sleep returns early once *stop is set (by a signal handler).
  explicit PosixClock(const volatile sig_atomic_t* stop = nullptr) : stop_(stop) {}
  int64_t mono_us() override;
  int64_t wall_us() override;
  void sleep_until_mono_us(int64_t t) override;

 private:
  const volatile sig_atomic_t* stop_;
};

}  // namespace vdev
