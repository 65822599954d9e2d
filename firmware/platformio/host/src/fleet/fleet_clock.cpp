#include "fleet_clock.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace fleet {
namespace {

static_assert(sizeof(sig_atomic_t) == sizeof(int), "the stop flag doubles as a futex word");

int64_t read_us(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

timespec to_timespec(int64_t us) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(us / 1000000);
  ts.tv_nsec = static_cast<long>((us % 1000000) * 1000);
  return ts;
}

int* futex_word(const volatile sig_atomic_t* flag) {
  return const_cast<int*>(reinterpret_cast<const volatile int*>(flag));
}

}  // namespace

int64_t mono_now_us() { return read_us(CLOCK_MONOTONIC); }
int64_t wall_now_us() { return read_us(CLOCK_REALTIME); }

int64_t FleetClock::mono_us() { return mono_now_us(); }
int64_t FleetClock::wall_us() { return wall_now_us(); }

void StopSignal::request() {
  flag_ = 1;
  syscall(SYS_futex, futex_word(&flag_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void StopSignal::sleep_until(int64_t mono_us) {
  const timespec deadline = to_timespec(mono_us);
  if (flag_ != 0) {  // stopped before this sleep began: a plain sleep
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
    }
    return;
  }
  // Sleeps while the flag is 0, until the absolute CLOCK_MONOTONIC deadline (FUTEX_WAIT_BITSET's clock);
  // the kernel compares the word atomically, so a request() just before the wait is never missed.
  while (flag_ == 0) {
    long rc = syscall(SYS_futex, futex_word(&flag_), FUTEX_WAIT_BITSET_PRIVATE, 0, &deadline, nullptr,
                      FUTEX_BITSET_MATCH_ANY);
    if (rc != 0 && errno == ETIMEDOUT) return;
  }
}

}  // namespace fleet
