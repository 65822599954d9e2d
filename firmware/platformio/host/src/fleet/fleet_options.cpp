#include "fleet_options.h"
#include "host_util.h"

#include <cstdio>

#include "payload.h"

namespace fleet {
namespace {

using tb::opt::Id;

bool check_fleet(const FleetOptions& o, std::string* error) {
  if (!o.conn.config.given(Id::devices)) {
    *error = "--devices N is required (1.." + std::to_string(kMaxDevices) + ")";
    return false;
  }
  if (o.out_dir().empty()) {
    *error = "--out-dir DIR is required (the send logs, connections.csv and summary.json go there)";
    return false;
  }
  const std::string last = device_id(o.prefix(), o.devices() - 1);
  if (o.prefix().empty() || !tb::valid_device_id(last.c_str())) {
    *error = "--device-prefix: expected 1.." + std::to_string(tb::kMaxDeviceId - kIndexDigits) +
             " characters of [A-Za-z0-9_.-], got \"" + o.prefix() + "\"";
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

std::string fleet_usage() {
  return "usage: fleet --devices N --out-dir DIR [options]   (N virtual ESP32s, SIMULATED sensors: the firmware's\n"
         "       unchanged core Publisher per device, one thread each)\n"
         "  --devices N --out-dir DIR --connect-rate R (devices started per second)\n"
         "  --device-prefix P (device i's id and client id: P, then i zero-padded)\n"
         "  --seed S (each device's random start offset within its first interval, and its sensors)\n"
         "  connection options as vdevice's (the same for every device):\n"
         "  --host H --port P (when not given: 1883 plain, 8883 tls) --transport T --ciphers LIST\n"
         "  --ca FILE --server-name NAME --cert FILE --key FILE --username U --password P --password-file FILE\n"
         "  --payload BYTES --samples N --interval-ms MS --qos Q --topic T\n"
         "  --keylog FILE (one NSS key log for all devices) --connect-timeout-ms MS\n"
         "  each device's connection lifecycle, as vdevice's: --connection MODE --per-connection K --close HOW;\n"
         "  every device keeps its own TLS session or ticket;\n"
         "  --sleep-ms MS (from a connection's last message to the next one's first; 0: one interval)\n"
         "  --connections-log FILE.csv (device,conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,\n"
         "      messages,close,error: one row per connection of every device)\n"
         "Writes DIR/<id>.csv (seq,t_send_us,bytes,t_intended_us), DIR/connections.csv\n"
         "(device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error: its first connection's) and\n"
         "DIR/summary.json.\n"
         "Exit 0: every device finished; 1: a device failed; 2: bad options; 130: stopped by SIGINT/SIGTERM.\n"
         "--check: check the options (files read, nothing sent), print ok; --describe-options: the table as JSON;\n"
         "--show-config: the configuration these options make, as JSON (every option, given or its default).\n"
         "Every option X-Y can also be given as environment variable TESTBED_X_Y; flags win.\n" +
         vdev::options_help(TB_FLEET);
}

bool parse_fleet_options(int argc, char** argv, FleetOptions* out, std::string* error, vdev::Mode* mode) {
  tb::opt::Values v;
  if (!vdev::parse_args(argc, argv, TB_FLEET, "fleet", &v, mode, error)) return false;
  if (mode->help || mode->describe) return true;
  if (!vdev::options_from(v, TB_FLEET, &out->conn, error)) return false;
  return check_fleet(*out, error);
}

}  // namespace fleet
