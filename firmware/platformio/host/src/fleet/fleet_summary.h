// The fleet's results, for the devices of its share: DIR/connections.csv (a row per device: its first connection's
// figures), the schedule lag read back from every device's send log, DIR/summary.json (with the lifecycle's
// connections and the client's count of resumed ones, which share of the fleet, and when it started).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fleet_device.h"
#include "fleet_shard.h"

namespace fleet {

struct LagStats {
  uint64_t n = 0;
  int64_t p50 = 0, p99 = 0, max = 0;
};

// When device 0's slot began: at_us on this host's CLOCK_REALTIME (--start-at-us T, or now + 10 ms), given: T was
// given; lead_us: T - the realtime clock when the wait was computed (negative: that late).
struct StartAt {
  int64_t at_us = 0;
  bool given = false;
  int64_t lead_us = 0;
};

struct FleetOutcome {
  StartAt start;
  std::vector<DeviceResult> devices;
  ProcStats cpu;          // taken when the last device ended (before the logs are read back)
  LagStats lag;           // t_send_us - t_intended_us over every message
  LagStats steady;        // t_send(seq) - t_send(0) - (t_intended(seq) - t_intended(0)), seq >= 1: lateness after the
                          // first message
  uint64_t log_rows = 0;  // rows read back from the send logs
  bool interrupted = false;
  bool keylog_failed = false;
  double wall_s = 0;
};

bool write_connections(const FleetOptions& o, const std::vector<DeviceResult>& rs, std::string* error);
// Reads every device's send log back; false (with the error) when one is missing or malformed.
bool read_lags(const FleetOptions& o, FleetOutcome* r, std::string* error);
bool write_summary(const FleetOptions& o, const FleetOutcome& r, std::string* error);

}  // namespace fleet
