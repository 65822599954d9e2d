// fleet command-line options: those of device_options.def the fleet takes (TB_FLEET): vdevice's
// connection options and connection lifecycle with its sleep (read as vdevice reads them, options.h) plus
// the fleet's: --devices, --connect-rate, --device-prefix, --out-dir.
#pragma once

#include <cstdint>
#include <string>

#include "options.h"

namespace fleet {

constexpr uint32_t kMaxDevices = static_cast<uint32_t>(tb::opt::spec(tb::opt::Id::devices).max);
constexpr int kIndexDigits = 4;  // device i = prefix + i zero-padded to 4 digits (f0000 .. f4999)

// The fleet's options: vdevice's (the same for every device) and the fleet's own, all in conn.config
// (device_options.def, TB_FLEET); these read the fleet's own in its types.
struct FleetOptions {
  vdev::Options conn;
  uint32_t devices() const { return static_cast<uint32_t>(conn.config.devices); }  // 1..kMaxDevices, required
  double connect_rate() const { return conn.config.connect_rate; }                 // devices started per second
  std::string prefix() const { return conn.config.device_prefix; }
  std::string out_dir() const { return conn.config.out_dir; }                     // required
};

// Parses argv (and the TESTBED_* variables of the fleet's options; flags win).
// false with a one-line error; mode: --help, --check, --describe-options.
bool parse_fleet_options(int argc, char** argv, FleetOptions* out, std::string* error, vdev::Mode* mode);
std::string fleet_usage();

// Device i's id (= its MQTT client id): prefix + i zero-padded.
std::string device_id(const std::string& prefix, uint32_t index);

}  // namespace fleet
