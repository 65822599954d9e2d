#include "drift_clock.h"

#include "net_path.h"

namespace vdev {

DriftClock::DriftClock(tb::Clock& base, int64_t offset_us, double drift_ppm)
    : base_(base), offset_us_(offset_us), rate_(1.0 + drift_ppm * 1e-6), mono0_(base.mono_us()) {}

namespace {

// The host's monotonic and wall clocks at one instant: the wall clock read between two monotonic reads, their
// midpoint taken, read again while the two were apart (the thread preempted between them on a busy host: the wall
// clock then belongs to a later instant than the first read, by as much as the preemption, 125 us seen in CI).
void clock_pair(tb::Clock& base, int64_t* mono, int64_t* wall) {
  for (int tries = 0; tries < 8; ++tries) {
    const int64_t before = base.mono_us();
    *wall = base.wall_us();
    const int64_t after = base.mono_us();
    *mono = before + (after - before) / 2;
    if (after - before <= 2) return;
  }
}

}  // namespace

int64_t DriftClock::drifted(int64_t since_us) const {
  return static_cast<int64_t>(static_cast<double>(since_us) * (rate_ - 1.0));
}

int64_t DriftClock::mono_us() {
  const int64_t m = base_.mono_us();
  return m + drifted(m - mono0_);
}

DriftClock::Stamp DriftClock::now() {
  int64_t m = 0;
  Stamp s;
  clock_pair(base_, &m, &s.true_us);
  s.board_us = s.true_us + drifted(m - mono0_) + offset_us_;
  return s;
}

DriftClock::Stamp DriftClock::at(int64_t host_mono_us) {
  int64_t m = 0;
  int64_t wall = 0;
  clock_pair(base_, &m, &wall);
  Stamp s;
  s.true_us = wall + (host_mono_us - m);
  s.board_us = s.true_us + drifted(host_mono_us - mono0_) + offset_us_;
  return s;
}

int64_t DriftClock::wall_us() {
  last_wall_ = now();
  if (next_wall_) {
    std::function<void(const Stamp&)> f;
    f.swap(next_wall_);
    f(last_wall_);
  }
  return last_wall_.board_us;
}

void DriftClock::sleep_until_mono_us(int64_t t) {
  // board mono b = m0 + (m - m0) * rate  =>  m = m0 + (b - m0) / rate
  const int64_t target = mono0_ + static_cast<int64_t>(static_cast<double>(t - mono0_) / rate_) + 1;  // rounds up
  sleep_serving(base_, work_, target, false);
}

}  // namespace vdev
