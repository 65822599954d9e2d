#include "drift_clock.h"

namespace vdev {

DriftClock::DriftClock(tb::Clock& base, int64_t offset_us, double drift_ppm)
    : base_(base), offset_us_(offset_us), rate_(1.0 + drift_ppm * 1e-6), mono0_(base.mono_us()) {}

int64_t DriftClock::drifted(int64_t since_us) const {
  return static_cast<int64_t>(static_cast<double>(since_us) * (rate_ - 1.0));
}

int64_t DriftClock::mono_us() {
  const int64_t m = base_.mono_us();
  return m + drifted(m - mono0_);
}

int64_t DriftClock::wall_us() {
  const int64_t m = base_.mono_us();
  return base_.wall_us() + drifted(m - mono0_) + offset_us_;
}

void DriftClock::sleep_until_mono_us(int64_t t) {
  // board mono b = m0 + (m - m0) * rate  =>  m = m0 + (b - m0) / rate
  const int64_t target = mono0_ + static_cast<int64_t>(static_cast<double>(t - mono0_) / rate_) + 1;  // rounds up
  base_.sleep_until_mono_us(target);
}

}  // namespace vdev
