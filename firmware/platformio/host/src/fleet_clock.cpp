#include "fleet_clock.h"

#include <time.h>

#include <chrono>

namespace fleet {
namespace {

int64_t read_us(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace

int64_t mono_now_us() { return read_us(CLOCK_MONOTONIC); }
int64_t wall_now_us() { return read_us(CLOCK_REALTIME); }

int64_t FleetClock::mono_us() { return mono_now_us(); }
int64_t FleetClock::wall_us() { return wall_now_us(); }

void StopSignal::request() {
  std::lock_guard<std::mutex> lock(mu_);
  flag_ = 1;
  cv_.notify_all();
}

void StopSignal::sleep_until(int64_t mono_us) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC (the waits use pthread_cond_clockwait on it).
  static_assert(std::chrono::steady_clock::is_steady, "steady_clock must be monotonic");
  const std::chrono::steady_clock::time_point deadline{std::chrono::microseconds(mono_us)};
  std::unique_lock<std::mutex> lock(mu_);
  const bool stopped_before = flag_ != 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return;
    if (!stopped_before && flag_ != 0) return;
  }
}

}  // namespace fleet
