#include "fleet_options.h"
#include "fleet_share.h"
#include "host_util.h"

#include <cstdio>
#include <cstring>

#include "payload.h"

namespace fleet {
namespace {

using tb::opt::Id;

bool check_share(FleetOptions* o, std::string* error) {
  if (!parse_share_weights(o->conn.config.share_weights, &o->weights, error)) return false;
  if (o->share_index() >= o->weights.size()) {
    *error = "--share-index " + std::to_string(o->share_index()) + ": --share-weights " + weights_text(o->weights) +
             " has " + std::to_string(o->weights.size()) + " share(s), 0.." + std::to_string(o->weights.size() - 1);
    return false;
  }
  o->share = share_devices(o->devices(), o->weights, o->share_index());
  return true;
}

bool check_fleet(FleetOptions* o, bool need_out_dir, std::string* error) {
  if (!o->conn.config.given(Id::devices)) {
    *error = "--devices N is required (1.." + std::to_string(kMaxDevices) + ")";
    return false;
  }
  if (need_out_dir && o->out_dir().empty()) {
    *error = "--out-dir DIR is required (the send logs, connections.csv and summary.json go there)";
    return false;
  }
  const std::string last = o->id(o->devices() - 1);
  if (o->prefix().empty() || !tb::valid_device_id(last.c_str())) {
    *error = "--device-prefix: expected 1.." + std::to_string(tb::kMaxDeviceId - index_digits(o->devices())) +
             " characters of [A-Za-z0-9_.-], got \"" + o->prefix() + "\"";
    return false;
  }
  return check_share(o, error);
}

}  // namespace

int index_digits(uint32_t devices) {
  int digits = 1;
  for (uint32_t last = devices > 0 ? devices - 1 : 0; last >= 10; last /= 10) ++digits;
  return digits < kMinIndexDigits ? kMinIndexDigits : digits;
}

std::string device_id(const std::string& prefix, uint32_t index, int digits) {
  char text[16];
  snprintf(text, sizeof(text), "%0*u", digits, static_cast<unsigned>(index));
  return prefix + text;
}

std::string FleetOptions::id(uint32_t index) const { return device_id(prefix(), index, index_digits(devices())); }

bool check_share_size(const FleetOptions& o, std::string* error) {
  if (o.share_size() <= kMaxDevicesPerHost) return true;
  const bool whole = o.weights.size() == 1;
  *error = "--devices " + std::to_string(o.devices()) + (whole ? "" : " with --share-weights " + weights_text(o.weights)) +
           " gives this host " + std::to_string(o.share_size()) + " devices" +
           (whole ? "" : " (share " + std::to_string(o.share_index()) + ")") + ", above the per-host limit of " +
           std::to_string(kMaxDevicesPerHost) + " devices: spread the fleet over more publisher hosts";
  return false;
}

std::string share_json(const FleetOptions& o) {
  std::string weights, indices;
  for (uint32_t w : o.weights) weights += (weights.empty() ? "" : ",") + std::to_string(w);
  for (uint32_t i : o.share) indices += (indices.empty() ? "" : ",") + std::to_string(i);
  const bool none = o.share.empty();
  return "{\"devices\":" + std::to_string(o.devices()) + ",\"share_weights\":[" + weights + "],\"share_index\":" +
         std::to_string(o.share_index()) + ",\"index_digits\":" + std::to_string(index_digits(o.devices())) +
         ",\"first_id\":" + vdev::json_string(o.id(0)) + ",\"last_id\":" + vdev::json_string(o.id(o.devices() - 1)) +
         ",\"per_host_limit\":" + std::to_string(kMaxDevicesPerHost) + ",\"share_devices\":" +
         std::to_string(o.share_size()) + ",\"share_first_id\":" + (none ? "null" : vdev::json_string(o.id(o.share.front()))) +
         ",\"share_last_id\":" + (none ? "null" : vdev::json_string(o.id(o.share.back()))) + ",\"indices\":[" + indices +
         "]}\n";
}

std::string fleet_usage() {
  return "usage: fleet --devices N --out-dir DIR [options]   (N virtual ESP32s, SIMULATED sensors: the firmware's\n"
         "       unchanged core Publisher per device, one thread each)\n"
         "  --devices N --out-dir DIR --connect-rate R (devices started per second)\n"
         "  --device-prefix P (device i's id and client id: P, then i zero-padded)\n"
         "  --seed S (each device's random start offset within its first interval, and its sensors)\n"
         "  a fleet across hosts: --devices and --connect-rate are the whole fleet's (one host runs at most " +
         std::to_string(kMaxDevicesPerHost) + " devices);\n"
         "  --share-weights W0,W1,... --share-index K: run share K only, the devices dealt to it by smooth weighted\n"
         "      round-robin over the weights (equal weights: i % shares), each keeping its global index, id, seeds and\n"
         "      start slot i / connect-rate; the ids are as wide as the fleet's last index (4 digits at least)\n"
         "  --start-at-us T: device 0's slot begins at T, epoch microseconds on this host's CLOCK_REALTIME (when not\n"
         "      given: now + 10 ms); device i's at T + i / connect-rate. A T more than " +
         std::to_string(kStartLateToleranceUs / 1000) + " ms past is refused (exit 2)\n"
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
         "Writes, for the devices of its share, DIR/<id>.csv (seq,t_send_us,bytes,t_intended_us), DIR/connections.csv\n"
         "(device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error: its first connection's) and\n"
         "DIR/summary.json (with \"share\": its index, the weights, its devices).\n"
         "Exit 0: every device finished; 1: a device failed; 2: bad options; 130: stopped by SIGINT/SIGTERM.\n"
         "--check: check the options (files read, nothing sent), print ok; --describe-options: the table as JSON;\n"
         "--show-config: the configuration these options make, as JSON (every option, given or its default);\n"
         "--describe-share: this share's devices (global indices) and the fleet's ids, as JSON.\n"
         "Every option X-Y can also be given as environment variable TESTBED_X_Y; flags win.\n" +
         vdev::options_help(TB_FLEET);
}

bool parse_fleet_options(int argc, char** argv, FleetOptions* out, std::string* error, FleetMode* mode) {
  std::vector<char*> args;  // argv without --describe-share, the fleet's own mode
  *mode = FleetMode();
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && strcmp(argv[i], "--describe-share") == 0) {
      mode->describe_share = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  tb::opt::Values v;
  if (!vdev::parse_args(static_cast<int>(args.size()), args.data(), TB_FLEET, "fleet", &v, &mode->common, error)) {
    return false;
  }
  if (mode->common.help || mode->common.describe) return true;
  if (!vdev::options_from(v, TB_FLEET, &out->conn, error)) return false;
  return check_fleet(out, !mode->describe_share, error);
}

}  // namespace fleet
