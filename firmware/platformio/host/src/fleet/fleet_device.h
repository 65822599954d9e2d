// One virtual device of the fleet: the firmware's unchanged core Publisher over PlainTcp or TlsTransport,
// simulated sensors, its send log; and the runner of a set of devices in this process, one std::thread each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fleet_clock.h"
#include "fleet_logs.h"
#include "fleet_options.h"
#include "tls_transport.h"

namespace fleet {

// What every device shares (read-only while they run).
struct FleetPlan {
  const FleetOptions* options = nullptr;
  std::string host;        // the broker's address, resolved once (or as given when that failed)
  tb::TlsOptions tls;      // PEM strings owned by the caller; keylog = the shared key log or nullptr
  int64_t mono_base_us = 0;  // device i is started at mono_base + i / connect rate (CLOCK_MONOTONIC), whether or
                             // not device i is in this share: the fleet's common timeline
  StopSignal* stop = nullptr;
  LogWriter* logs = nullptr;
  SharedKeylog* keylog = nullptr;  // the same object as tls.keylog, or nullptr
};

struct DeviceResult {
  uint32_t index = 0;
  int64_t t_start_us = -1;  // wall clock of the device's start (its connect-rate slot)
  int64_t tcp_connect_us = -1;
  int64_t handshake_us = -1;
  int64_t connack_us = -1;
  uint32_t messages = 0;
  uint32_t connections = 0;  // opened or attempted (the lifecycle's: one per K messages; persistent: 1)
  uint32_t resumed = 0;      // of them, with the client's claim of a resumed TLS session
  bool connected = false;  // CONNACK accepted
  std::string error;       // tb::Err name; empty: the device finished its run
  std::string message;     // the error's text
};

// Device i's start slot and its seeded random start offset (0 <= offset < interval).
int64_t device_slot_us(const FleetPlan& p, uint32_t index);
int64_t device_offset_us(const FleetOptions& o, uint32_t index);
Schedule device_schedule(const FleetOptions& o);
uint64_t mix64(uint64_t x);

// Runs device `index`: sleeps until its slot + offset, then tb::Publisher::run with the run's connection
// lifecycle (each device its own transport, so its own saved TLS session or ticket); t_intended of its
// messages = t_start + offset + the schedule's offset of seq (the core's persistent schedule starts after
// its CONNACK, so the lag includes the connect).
void run_device(const FleetPlan& p, uint32_t index, DeviceResult* out);

// Runs the given devices in this process, each started (a std::thread) at its slot. SIGINT and SIGTERM must
// be blocked in the calling thread (so in all): they are taken here with sigtimedwait and stop the fleet.
// Returns the signal taken, 0 when none.
int run_devices(const FleetPlan& p, const std::vector<uint32_t>& indices, std::vector<DeviceResult>* out);

// Waits until CLOCK_MONOTONIC >= until_us or SIGINT/SIGTERM arrives: the signal's number, else 0.
int wait_signal_until(int64_t until_us);

}  // namespace fleet
