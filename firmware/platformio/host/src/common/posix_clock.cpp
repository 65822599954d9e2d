#include "posix_clock.h"

#include <errno.h>
#include <time.h>

namespace vdev {
namespace {
int64_t read_us(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}
}  // namespace

int64_t PosixClock::mono_us() { return read_us(CLOCK_MONOTONIC); }
int64_t PosixClock::wall_us() { return read_us(CLOCK_REALTIME); }

void PosixClock::sleep_until_mono_us(int64_t t) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(t / 1000000);
  ts.tv_nsec = static_cast<long>((t % 1000000) * 1000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    if (stop_ != nullptr && *stop_ != 0) return;
  }
}

}  // namespace vdev
