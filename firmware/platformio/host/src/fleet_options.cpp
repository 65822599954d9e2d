#include "fleet_options.h"
#include "host_util.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "payload.h"

namespace fleet {
namespace {

using vdev::parse_uint;

// The connection options handed, as given, to vdevice's parser (vdev::parse_options).
const char* const kForwarded[] = {
    "host", "port", "transport", "ciphers", "ca", "server-name", "cert", "key", "username", "password",
    "payload", "samples", "interval-ms", "qos", "topic", "keylog", "seed", "connect-timeout-ms",
};

enum FleetId { kDevices, kConnectRate, kPrefix, kOutDir };

struct FleetSpec {
  const char* flag;
  const char* env;
  FleetId id;
};

const FleetSpec kFleet[] = {
    {"devices", "TESTBED_DEVICES", kDevices},
    {"connect-rate", "TESTBED_CONNECT_RATE", kConnectRate},
    {"device-prefix", "TESTBED_DEVICE_PREFIX", kPrefix},
    {"out-dir", "TESTBED_OUT_DIR", kOutDir},
};

bool parse_rate(const char* text, double* out) {
  errno = 0;
  char* end = nullptr;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v) || v < 0.01 || v > 100000.0) return false;
  *out = v;
  return true;
}

bool apply_fleet(FleetOptions* o, FleetId id, const std::string& name, const char* value, std::string* error) {
  uint64_t v = 0;
  switch (id) {
    case kDevices:
      if (parse_uint(value, kMaxDevices, &v) && v >= 1) {
        o->devices = static_cast<uint32_t>(v);
        return true;
      }
      *error = name + ": expected an integer 1.." + std::to_string(kMaxDevices) + ", got \"" + value + "\"";
      return false;
    case kConnectRate:
      if (parse_rate(value, &o->connect_rate)) return true;
      *error = name + ": expected devices per second 0.01..100000 (decimals allowed), got \"" + value + "\"";
      return false;
    case kPrefix: o->prefix = value; return true;
    case kOutDir: o->out_dir = value; return true;
  }
  return false;
}

const FleetSpec* fleet_spec(const std::string& name) {
  for (const FleetSpec& s : kFleet) {
    if (name == s.flag) return &s;
  }
  return nullptr;
}

bool forwarded(const std::string& name) {
  for (const char* f : kForwarded) {
    if (name == f) return true;
  }
  return false;
}

// argv: the fleet's options applied, the connection options collected (as "--name=value") for vdevice's parser.
bool split_args(int argc, char** argv, FleetOptions* o, std::vector<std::string>* fwd, std::string* error,
                bool* help) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return true;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      *error = (a[0] == '-' ? "unknown option: " : "unexpected argument: ") + a;
      return false;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FleetSpec* spec = fleet_spec(name);
    if (spec == nullptr && !forwarded(name)) {
      *error = "unknown option: --" + name + " (fleet --help lists its options)";
      return false;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      *error = "missing value: --" + name;
      return false;
    }
    if (spec != nullptr && !apply_fleet(o, spec->id, "--" + name, value.c_str(), error)) return false;
    if (spec == nullptr) fwd->push_back("--" + name + "=" + value);
  }
  return true;
}

bool check_fleet(const FleetOptions& o, std::string* error) {
  if (o.devices == 0) {
    *error = "--devices N is required (1.." + std::to_string(kMaxDevices) + ")";
    return false;
  }
  if (o.out_dir.empty()) {
    *error = "--out-dir DIR is required (the send logs, connections.csv and summary.json go there)";
    return false;
  }
  const std::string last = device_id(o.prefix, o.devices - 1);
  if (o.prefix.empty() || !tb::valid_device_id(last.c_str())) {
    *error = "--device-prefix: expected 1.." + std::to_string(tb::kMaxDeviceId - kIndexDigits) +
             " characters of [A-Za-z0-9_.-], got \"" + o.prefix + "\"";
    return false;
  }
  return true;
}

}  // namespace

std::string device_id(const std::string& prefix, uint32_t index) {
  char digits[16];
  snprintf(digits, sizeof(digits), "%0*u", kIndexDigits, static_cast<unsigned>(index));
  return prefix + digits;
}

const char* fleet_usage() {
  return "usage: fleet --devices N --out-dir DIR [options]   (N virtual ESP32s, SIMULATED sensors: the firmware's\n"
         "       unchanged core Publisher per device, one thread each)\n"
         "  --devices N (1..5000) --out-dir DIR --connect-rate R (100 devices started per second)\n"
         "  --device-prefix P (f: device i's id and client id = P + i zero-padded to 4 digits, f0000)\n"
         "  --seed S (1: each device's random start offset within its first interval, and its sensors)\n"
         "  connection options as vdevice's (the same for every device):\n"
         "  --host H (127.0.0.1) --port P (1883 plain / 8883 tls) --transport plain|tls --ciphers LIST\n"
         "  --ca FILE --server-name NAME --cert FILE --key FILE --username U --password P --payload BYTES (65)\n"
         "  --samples N (200) --interval-ms MS (1000) --qos 0|1 --topic T (testbed/sensors)\n"
         "  --keylog FILE (one NSS key log for all devices) --connect-timeout-ms MS (10000)\n"
         "Writes DIR/<id>.csv (seq,t_send_us,bytes,t_intended_us), DIR/connections.csv\n"
         "(device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error) and DIR/summary.json.\n"
         "Exit 0: every device finished; 1: a device failed; 2: bad options; 130: stopped by SIGINT/SIGTERM.\n"
         "The connection options also read vdevice's TESTBED_* variables; TESTBED_DEVICES, TESTBED_CONNECT_RATE,\n"
         "TESTBED_DEVICE_PREFIX, TESTBED_OUT_DIR the fleet's; flags win. Connections are persistent.\n";
}

bool parse_fleet_options(int argc, char** argv, FleetOptions* out, std::string* error, bool* help) {
  *help = false;
  for (const FleetSpec& s : kFleet) {
    const char* v = getenv(s.env);
    if (v != nullptr && *v != '\0' && !apply_fleet(out, s.id, s.env, v, error)) return false;
  }
  std::vector<std::string> fwd;
  if (!split_args(argc, argv, out, &fwd, error, help)) return false;
  if (*help) return true;
  std::vector<char*> fargv;
  std::string prog = "fleet";
  fargv.push_back(&prog[0]);
  for (std::string& s : fwd) fargv.push_back(&s[0]);
  fargv.push_back(nullptr);
  bool ignored = false;
  if (!vdev::parse_options(static_cast<int>(fwd.size() + 1), fargv.data(), &out->conn, error, &ignored)) return false;
  return check_fleet(*out, error);
}

}  // namespace fleet
