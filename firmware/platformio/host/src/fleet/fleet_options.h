// fleet command-line options: those of device_options.def the fleet takes (TB_FLEET): vdevice's
// connection options and connection lifecycle with its sleep (read as vdevice reads them, options.h) plus
// the fleet's: --devices, --connect-rate, --device-prefix, --out-dir, its share (--share-weights,
// --share-index: fleet_share.h) and its start (--start-at-us).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"

namespace fleet {

// The whole fleet's size (device_options.def): its ids are as wide as its last index needs.
constexpr uint32_t kMaxDevices = static_cast<uint32_t>(tb::opt::spec(tb::opt::Id::devices).max);
// What one host runs at most (its share): a thread per device (256 KiB of stack reserved each), a worker process
// per ~1,000 descriptors (select()'s FD_SETSIZE), a TLS device's mbedTLS record buffers (16 KiB each way);
// orchestrator/model/axes.py MAX_DEVICES_PER_HOST is the same figure.
constexpr uint32_t kMaxDevicesPerHost = 10000;
constexpr int kMinIndexDigits = 4;  // device i = prefix + i zero-padded to 4 digits (f0000 .. f9999), wider when
                                    // the fleet's last index needs more (f00000 .. f10000 for 10,001 devices)

// --start-at-us: a T this far in the past on this host's clock still starts (at once: the devices whose slots have
// passed start late, and say so in their first send's lag); further in the past is refused. A T further ahead than
// kStartAheadMaxUs is refused too (a unit mistaken: nanoseconds).
constexpr int64_t kStartLateToleranceUs = 50000;
constexpr int64_t kStartAheadMaxUs = 3600LL * 1000000;

// Digits of a fleet's device indices: 4, or as many as its last index (devices - 1) has.
int index_digits(uint32_t devices);

// The fleet's options: vdevice's (the same for every device) and the fleet's own, all in conn.config
// (device_options.def, TB_FLEET); these read the fleet's own in its types.
struct FleetOptions {
  vdev::Options conn;
  std::vector<uint32_t> weights;  // --share-weights, parsed
  std::vector<uint32_t> share;    // the global indices of the devices this program runs (its share), ascending
  uint32_t devices() const { return static_cast<uint32_t>(conn.config.devices); }  // the fleet's: 1..kMaxDevices
  uint32_t share_index() const { return static_cast<uint32_t>(conn.config.share_index); }
  uint32_t share_size() const { return static_cast<uint32_t>(share.size()); }
  double connect_rate() const { return conn.config.connect_rate; }  // the fleet's devices started per second
  int64_t start_at_us() const { return static_cast<int64_t>(conn.config.start_at_us); }  // 0: now + 10 ms
  std::string prefix() const { return conn.config.device_prefix; }
  std::string out_dir() const { return conn.config.out_dir; }                     // required
  std::string id(uint32_t index) const;  // device `index`'s id (= its MQTT client id), as wide as the fleet needs
};

// What the fleet is asked to do besides running: vdevice's modes, and --describe-share (this share's devices as
// JSON: the fleet's dealing, see fleet_share.h).
struct FleetMode {
  vdev::Mode common;
  bool describe_share = false;
};

// Parses argv (and the TESTBED_* variables of the fleet's options; flags win).
// false with a one-line error; mode: --help, --check, --describe-options, --show-config, --describe-share.
bool parse_fleet_options(int argc, char** argv, FleetOptions* out, std::string* error, FleetMode* mode);
// The share fits one host (kMaxDevicesPerHost); false with the error naming the limit.
bool check_share_size(const FleetOptions& o, std::string* error);
std::string fleet_usage();
// --describe-share's JSON.
std::string share_json(const FleetOptions& o);

// Device i's id (= its MQTT client id): prefix + i zero-padded to `digits`.
std::string device_id(const std::string& prefix, uint32_t index, int digits);

}  // namespace fleet
