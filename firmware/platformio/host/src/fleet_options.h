// fleet command-line options: vdevice's connection options (parsed by vdevice's own parser, options.h)
// plus the fleet's: --devices, --connect-rate, --device-prefix, --out-dir.
#pragma once

#include <cstdint>
#include <string>

#include "options.h"

namespace fleet {

constexpr uint32_t kMaxDevices = 5000;
constexpr int kIndexDigits = 4;  // device i = prefix + i zero-padded to 4 digits (f0000 .. f4999)

struct FleetOptions {
  vdev::Options conn;         // host, port, transport, ciphers, ca, server name, credentials, payload,
                              // samples, interval, qos, topic, keylog, seed, connect timeout
  uint32_t devices = 0;       // 1..kMaxDevices, required
  double connect_rate = 100;  // devices started per second
  std::string prefix = "f";
  std::string out_dir;        // required
};

// Parses argv (and TESTBED_* variables: vdevice's for the connection options, TESTBED_DEVICES,
// TESTBED_CONNECT_RATE, TESTBED_DEVICE_PREFIX, TESTBED_OUT_DIR for the fleet's; flags win).
// false with a one-line error; help = true on --help.
bool parse_fleet_options(int argc, char** argv, FleetOptions* out, std::string* error, bool* help);
const char* fleet_usage();

// Device i's id (= its MQTT client id): prefix + i zero-padded.
std::string device_id(const std::string& prefix, uint32_t index);

}  // namespace fleet
