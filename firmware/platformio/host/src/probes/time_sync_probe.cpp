// time_sync_probe: runs the core's time_sync against a time-echo service and prints the samples.
//   time_sync_probe --host 127.0.0.1 --port 9123 [--count 16] [--offset-us 0] [--drift-ppm 0]
//                   [--drift-origin-us HOST_WALL_US]
// stdout: CSV "t1_us,t2_us,t3_us,t4_us", one line per sample. --offset-us / --drift-ppm shift the
// probe's wall clock (a board whose clock is off), so a test on one host can check the estimate;
// two runs with the same --drift-origin-us see the same simulated board clock.
// Exit 0, 1 (one stderr line "time_sync_probe: error <ErrName>: <message>") or 2 (bad options).
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "posix_clock.h"
#include "posix_udp.h"
#include "time_sync.h"

namespace {

constexpr uint32_t kMaxCount = 1024;

// The wall clock of a board that is offset_us ahead of the host at host wall time origin_us and
// runs drift_ppm fast: board = host + offset + (host - origin) x drift.
class ShiftedClock : public tb::Clock {
 public:
  ShiftedClock(tb::Clock& base, int64_t offset_us, double drift_ppm, int64_t origin_us)
      : base_(base), offset_us_(offset_us), drift_ppm_(drift_ppm), origin_us_(origin_us) {}
  int64_t mono_us() override { return base_.mono_us(); }
  int64_t wall_us() override {
    const int64_t host = base_.wall_us();
    return host + offset_us_ + static_cast<int64_t>(static_cast<double>(host - origin_us_) * drift_ppm_ * 1e-6);
  }
  void sleep_until_mono_us(int64_t t) override { base_.sleep_until_mono_us(t); }

 private:
  tb::Clock& base_;
  int64_t offset_us_;
  double drift_ppm_;
  int64_t origin_us_;
};

struct Options {
  const char* host = "127.0.0.1";
  long port = -1;
  long count = 16;
  long long offset_us = 0;
  double drift_ppm = 0;
  long long drift_origin_us = -1;  // -1: the probe's start
};

int usage(const char* why) {
  fprintf(stderr,
          "time_sync_probe: %s\nusage: time_sync_probe --host H --port N [--count 1..%u] [--offset-us US]\n"
          "                       [--drift-ppm PPM] [--drift-origin-us HOST_WALL_US]\n",
          why, static_cast<unsigned>(kMaxCount));
  return 2;
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* k = argv[i];
    const char* v = argv[i + 1];
    char* end = nullptr;
    if (strcmp(k, "--host") == 0) {
      o->host = v;
      continue;
    }
    if (strcmp(k, "--port") == 0) o->port = strtol(v, &end, 10);
    else if (strcmp(k, "--count") == 0) o->count = strtol(v, &end, 10);
    else if (strcmp(k, "--offset-us") == 0) o->offset_us = strtoll(v, &end, 10);
    else if (strcmp(k, "--drift-ppm") == 0) o->drift_ppm = strtod(v, &end);
    else if (strcmp(k, "--drift-origin-us") == 0) o->drift_origin_us = strtoll(v, &end, 10);
    else return false;
    if (end == v || *end != '\0') return false;
  }
  return argc % 2 == 1 && o->port > 0 && o->port < 65536 && o->count > 0 &&
         o->count <= static_cast<long>(kMaxCount);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc == 2 && strcmp(argv[1], "--help") == 0) {
    usage("NTP-style exchanges with a time-echo service (orchestrator/clients/time_echo.py)");
    return 0;
  }
  if (!parse(argc, argv, &o)) return usage("bad options");
  vdev::PosixClock host_clock;
  const int64_t origin = o.drift_origin_us >= 0 ? o.drift_origin_us : host_clock.wall_us();
  ShiftedClock clock(host_clock, o.offset_us, o.drift_ppm, origin);
  vdev::PosixUdp udp;
  static tb::TimeSample samples[kMaxCount];
  uint32_t got = 0;
  tb::Err e = tb::time_sync(udp, clock, o.host, static_cast<uint16_t>(o.port), static_cast<uint32_t>(o.count),
                            samples, &got);
  if (e == tb::Err::TimeSyncNoReply) {
    fprintf(stderr, "time_sync_probe: error %s: none of %ld exchanges with %s:%ld got a valid reply within %u ms\n",
            tb::err_name(e), o.count, o.host, o.port, static_cast<unsigned>(tb::kTimeSyncReplyTimeoutMs));
    return 1;
  }
  if (e != tb::Err::Ok) {
    fprintf(stderr, "time_sync_probe: error %s: %s\n", tb::err_name(e), udp.error_text());
    return 1;
  }
  printf("t1_us,t2_us,t3_us,t4_us\n");
  for (uint32_t i = 0; i < got; ++i) {
    printf("%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", samples[i].t1_us, samples[i].t2_us,
           samples[i].t3_us, samples[i].t4_us);
  }
  return 0;
}
