// The fleet's stop and its clock. One StopSignal for all device threads: request() (the main thread, on
// SIGINT/SIGTERM) sets the flag the core's Publisher checks before each message (set_stop_flag) and wakes
// every device sleeping in FleetClock, so each stops before its next message instead of at its due time.
// A condition variable, not a signal per thread: a signal would also interrupt the core's select() and
// connect() (a connect in progress would fail with EINTR instead of finishing), and it is as cheap: on the
// 2-CPU VM measured, a device's timed sleep costs 50-110 us of CPU per message either way (the wake-up),
// clock_nanosleep at most ~10 % less.
#pragma once

#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <mutex>

#include "clock.h"

namespace fleet {

class StopSignal {
 public:
  void request();
  bool requested() const { return flag_ != 0; }
  // For tb::Publisher::set_stop_flag: written only by request(), read by the device threads.
  const volatile sig_atomic_t* flag() const { return &flag_; }
  // Sleeps until CLOCK_MONOTONIC >= mono_us; a stop requested DURING the sleep ends it early (as EINTR
  // ends vdevice's PosixClock sleep). A sleep begun after the stop runs its course: the core checks the
  // flag itself before sleeping, and the TCP connect's retry pause must stay a pause.
  void sleep_until(int64_t mono_us);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  volatile sig_atomic_t flag_ = 0;
};

class FleetClock : public tb::Clock {
 public:
  explicit FleetClock(StopSignal& stop) : stop_(stop) {}
  int64_t mono_us() override;
  int64_t wall_us() override;
  void sleep_until_mono_us(int64_t t) override { stop_.sleep_until(t); }

 private:
  StopSignal& stop_;
};

int64_t mono_now_us();
int64_t wall_now_us();

}  // namespace fleet
