// board-emu's emulated network path: a delay and a jitter per direction, applied in userspace by the
// Datagram and Transport decorators (path_datagram.h, path_transport.h), and the ground-truth log
// that records, per message and per clock exchange, the host's true time next to the board's.
//
// Delay of one packet = delay_us + a jitter drawn uniformly from the integers [0, jitter_us]
// (std::mt19937_64 seeded from --seed, one generator per direction). FIFO: a packet never leaves
// before the one handed over before it in the same direction; when its draw would release it
// earlier, it leaves right after that one (release = max(now + delay, previous release)).
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include "clock.h"

namespace vdev {

class PathDirection {
 public:
  PathDirection(uint32_t delay_us, uint32_t jitter_us, uint64_t seed);
  bool active() const { return delay_us_ != 0 || jitter_us_ != 0; }
  // Host-monotonic time at which a packet handed over at now_mono_us leaves (FIFO, see above).
  int64_t release_at(int64_t now_mono_us);

 private:
  uint32_t delay_us_;
  uint32_t jitter_us_;
  std::mt19937_64 rng_;
  int64_t last_release_ = INT64_MIN;
};

// Board -> lab (requests, PUBLISH and every other write to the broker) and lab -> board.
struct NetPath {
  NetPath(uint32_t up_us, uint32_t up_jitter_us, uint32_t down_us, uint32_t down_jitter_us, uint64_t seed);
  bool active() const { return up.active() || down.active(); }
  PathDirection up;
  PathDirection down;
  // The network is gone (board-emu --network-drop-after-messages): from now on nothing is written and
  // nothing is read in either direction, what is in flight is lost, and a connect never completes; for good,
  // or until back_at_mono_us (--network-down-ms: an outage, after which new connections go through).
  bool dropped = false;
  int64_t back_at_mono_us = INT64_MAX;
  bool is_down(int64_t now_mono_us) {
    if (dropped && now_mono_us >= back_at_mono_us) dropped = false;
    return dropped;
  }
};

// Work due at host-monotonic times (the uplink's delay line) that has to run while the board sleeps.
class TimedWork {
 public:
  virtual ~TimedWork() = default;
  virtual int64_t next_due_mono_us() const = 0;  // INT64_MAX: nothing pending
  virtual void run_due() = 0;                    // does what is due now
};

// Sleeps until host.mono_us() >= until_mono_us, doing work's due items on the way (work may be null).
// The work's items, and the end when precise_end is set (a path's hold), are met to the microsecond:
// the sleep ends kSpinUs early and the rest is spent polling the clock, because a timer wakeup on a
// busy host comes 50..500 us late. A signal that cuts a sleep short ends it there.
constexpr int64_t kSpinUs = 300;
void sleep_serving(tb::Clock& host, TimedWork* work, int64_t until_mono_us, bool precise_end);

// The ground-truth CSV: one comment line (the injected clock error and path), the column line
// "kind,seq,true_us,board_us", then one row per event, flushed per line; mode 0600.
class TruthLog {
 public:
  TruthLog() = default;
  ~TruthLog();
  TruthLog(const TruthLog&) = delete;
  TruthLog& operator=(const TruthLog&) = delete;

  bool open(const std::string& path, const std::string& comment, std::string* error);
  void row(const char* kind, uint32_t seq, int64_t true_us, int64_t board_us);

 private:
  FILE* f_ = nullptr;
};

}  // namespace vdev
