// A board's clock seen from the host: board time = true time * (1 + drift) + offset.
// board-emu uses it to give the emulated board a clock that is off and runs fast or slow, so the
// clock exchanges (time_sync) have something to find.
#pragma once

#include <cstdint>

#include "clock.h"

namespace vdev {

class DriftClock : public tb::Clock {
 public:
  // offset_us: added to the wall clock; drift_ppm: how much faster (+) or slower (-) the board's
  // clock runs, applied to both the monotonic and the wall clock from construction on.
  DriftClock(tb::Clock& base, int64_t offset_us, double drift_ppm);
  int64_t mono_us() override;
  int64_t wall_us() override;
  void sleep_until_mono_us(int64_t t) override;

 private:
  int64_t drifted(int64_t since_us) const;

  tb::Clock& base_;
  int64_t offset_us_;
  double rate_;  // 1 + drift
  int64_t mono0_;
};

}  // namespace vdev
