// A board's clock seen from the host: board time = true time * (1 + drift) + offset.
// board-emu uses it to give the emulated board a clock that is off and runs fast or slow, so the
// clock exchanges (time_sync) have something to find.
#pragma once

#include <cstdint>
#include <functional>

#include "clock.h"

namespace vdev {

class TimedWork;

class DriftClock : public tb::Clock {
 public:
  // The host's true wall clock (base.wall_us(), CLOCK_REALTIME) and the board's at one instant.
  struct Stamp {
    int64_t true_us = 0;
    int64_t board_us = 0;
  };

  // offset_us: added to the wall clock; drift_ppm: how much faster (+) or slower (-) the board's
  // clock runs, applied to both the monotonic and the wall clock from construction on.
  DriftClock(tb::Clock& base, int64_t offset_us, double drift_ppm);
  int64_t mono_us() override;
  int64_t wall_us() override;
  // Sleeps; with set_sleep_work, does the work's due items (the emulated path's delay line) meanwhile.
  void sleep_until_mono_us(int64_t t) override;

  // Ground truth for board-emu's truth log (none of these is seen by the core):
  Stamp now();                                   // both clocks now; not recorded
  Stamp at(int64_t host_mono_us);                // both clocks at that host-monotonic instant
  Stamp last_wall() const { return last_wall_; }  // the pair behind the latest wall_us() value
  // f is called (once) with the pair of the next wall_us() call, e.g. the t4 stamp of a clock exchange.
  void on_next_wall(std::function<void(const Stamp&)> f) { next_wall_ = std::move(f); }
  void set_sleep_work(TimedWork* work) { work_ = work; }

 private:
  int64_t drifted(int64_t since_us) const;

  tb::Clock& base_;
  int64_t offset_us_;
  double rate_;  // 1 + drift
  int64_t mono0_;
  Stamp last_wall_;
  std::function<void(const Stamp&)> next_wall_;
  TimedWork* work_ = nullptr;
};

}  // namespace vdev
