// The fleet's stop and its clock. One StopSignal for all device threads: request() (the main thread, on
// SIGINT/SIGTERM) sets the flag the core's Publisher checks before each message (set_stop_flag) and wakes
// every device sleeping in FleetClock, so each stops before its next message instead of at its due time.
// The sleep is a futex wait on the stop flag with an absolute deadline: one system call per sleep, as
// clock_nanosleep (a condition variable with its mutex cost ~10 % more CPU per message), and no signal per
// thread (a signal would also interrupt the core's select() and connect(): a connect in progress would fail
// with EINTR instead of finishing).
#pragma once

#include <csignal>
#include <cstdint>

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
  volatile sig_atomic_t flag_ = 0;  // also the futex word the sleeps wait on
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
