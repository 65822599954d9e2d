#include "fleet_summary.h"
#include "host_util.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace fleet {
namespace {

using vdev::json_string;

constexpr size_t kErrorsListed = 10;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// Nearest-rank percentiles of v (sorted here).
LagStats stats_of(std::vector<int64_t>* v) {
  LagStats s;
  s.n = v->size();
  if (v->empty()) return s;
  std::sort(v->begin(), v->end());
  auto rank = [&](double q) {
    size_t k = static_cast<size_t>(q * static_cast<double>(v->size()) + 0.999999);
    return (*v)[(k == 0 ? 1 : k) - 1];
  };
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  s.max = v->back();
  return s;
}

// One send log: every row's lag, and each seq >= 1's lateness after seq 0 (against the schedule's t_intended).
bool read_one(const std::string& path, std::vector<int64_t>* lag, std::vector<int64_t>* steady, uint64_t* rows,
              std::string* error) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) {
    *error = "cannot read " + path + ": " + strerror(errno);
    return false;
  }
  char line[128];
  bool ok = fgets(line, sizeof(line), f) != nullptr && strncmp(line, kSendLogHeader, strlen(kSendLogHeader)) == 0;
  int64_t first = -1, first_intended = 0;
  while (ok && fgets(line, sizeof(line), f) != nullptr) {
    uint64_t seq = 0;
    int64_t sent = 0, intended = 0;
    size_t bytes = 0;
    if (sscanf(line, "%" SCNu64 ",%" SCNd64 ",%zu,%" SCNd64, &seq, &sent, &bytes, &intended) != 4) ok = false;
    if (!ok) break;
    lag->push_back(sent - intended);
    if (seq == 0) {
      first = sent;
      first_intended = intended;
    }
    if (seq > 0 && first >= 0) steady->push_back(sent - first - (intended - first_intended));
    ++*rows;
  }
  fclose(f);
  if (!ok) *error = "malformed send log " + path;
  return ok;
}

std::string lag_json(const LagStats& s) {
  if (s.n == 0) return "{\"n\":0,\"p50\":null,\"p99\":null,\"max\":null}";
  char buf[160];
  snprintf(buf, sizeof(buf), "{\"n\":%" PRIu64 ",\"p50\":%" PRId64 ",\"p99\":%" PRId64 ",\"max\":%" PRId64 "}", s.n,
           s.p50, s.p99, s.max);
  return buf;
}

// "connected", "failed" (by error name), "failed_devices", "messages_sent", "errors" (the first few).
std::string device_counts_json(const FleetOptions& o, const std::vector<DeviceResult>& rs, uint64_t* messages) {
  std::map<std::string, uint32_t> failed;
  uint32_t connected = 0, nfailed = 0;
  uint64_t connections = 0, resumed = 0;
  std::string errors;
  *messages = 0;
  for (const DeviceResult& r : rs) {
    connected += r.connected ? 1 : 0;
    *messages += r.messages;
    connections += r.connections;
    resumed += r.resumed;
    if (r.error.empty()) continue;
    ++failed[r.error];
    if (nfailed++ < kErrorsListed) {
      errors += std::string(errors.empty() ? "" : ",") + "{\"device\":" + json_string(o.id(r.index)) +
                ",\"error\":" + json_string(r.error) + ",\"message\":" + json_string(r.message) + "}";
    }
  }
  std::string f;
  for (const auto& kv : failed) f += std::string(f.empty() ? "" : ",") + json_string(kv.first) + ":" + std::to_string(kv.second);
  const tb::PublishConfig& c = o.conn.publish;
  return "\"connection_mode\":" + json_string(tb::connection_mode_name(c.mode)) + ",\"per_connection\":" +
         std::to_string(c.per_connection) + ",\"close\":" + json_string(tb::close_mode_name(c.close)) +
         ",\"sleep_ms\":" + std::to_string(static_cast<double>(c.sleep_us) / 1000.0) + ",\"connections\":" +
         std::to_string(connections) + ",\"resumed_connections\":" + std::to_string(resumed) +
         ",\"connected\":" + std::to_string(connected) + ",\"failed\":{" + f + "},\"failed_devices\":" +
         std::to_string(nfailed) + ",\"messages_sent\":" + std::to_string(*messages) + ",\"errors\":[" + errors + "]";
}

// Which share of which fleet these figures are ("devices" is the share's), and when it started.
std::string share_fields(const FleetOptions& o, const FleetOutcome& r) {
  std::string weights;
  for (uint32_t w : o.weights) weights += (weights.empty() ? "" : ",") + std::to_string(w);
  return "\"fleet_devices\":" + std::to_string(o.devices()) + ",\"share\":{\"index\":" +
         std::to_string(o.share_index()) + ",\"weights\":[" + weights + "],\"devices\":" +
         std::to_string(o.share_size()) + "},\"index_digits\":" + std::to_string(index_digits(o.devices())) +
         ",\"start_at_us\":" + std::to_string(r.start.at_us) + ",\"start_at_given\":" +
         (r.start.given ? "true" : "false") + ",\"start_lead_us\":" + std::to_string(r.start.lead_us) + ",";
}

bool write_atomic(const std::string& path, const std::string& text, std::string* error) {
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    *error = "cannot write " + tmp + ": " + strerror(errno);
    return false;
  }
  bool ok = fputs(text.c_str(), f) >= 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot write " + path + ": " + strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

bool write_connections(const FleetOptions& o, const std::vector<DeviceResult>& rs, std::string* error) {
  std::string text = std::string(kConnectionsHeader) + "\n";
  for (const DeviceResult& r : rs) {
    text += o.id(r.index) + "," + (r.t_start_us >= 0 ? std::to_string(r.t_start_us) : "") + "," +
            ms_field(r.tcp_connect_us) + "," + ms_field(r.handshake_us) + "," + ms_field(r.connack_us) + "," +
            std::to_string(r.messages) + "," + csv_field(r.error) + "\n";
  }
  return write_atomic(o.out_dir() + "/connections.csv", text, error);
}

bool read_lags(const FleetOptions& o, FleetOutcome* r, std::string* error) {
  std::vector<int64_t> lag, steady;
  const uint64_t expected = static_cast<uint64_t>(o.share_size()) * o.conn.publish.samples;
  lag.reserve(static_cast<size_t>(expected < 10000000 ? expected : 10000000));
  bool ok = true;
  for (uint32_t i : o.share) {
    std::string e;
    if (!read_one(o.out_dir() + "/" + o.id(i) + ".csv", &lag, &steady, &r->log_rows, &e) && ok) {
      *error = e;
      ok = false;
    }
  }
  r->lag = stats_of(&lag);
  r->steady = stats_of(&steady);
  return ok;
}

bool write_summary(const FleetOptions& o, const FleetOutcome& r, std::string* error) {
  uint64_t messages = 0;
  const std::string counts = device_counts_json(o, r.devices, &messages);
  const double cpu_s = r.cpu.user_s + r.cpu.sys_s;
  char cpu[256];
  snprintf(cpu, sizeof(cpu), "\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f,\"cpu_us_per_message\":", r.cpu.user_s, r.cpu.sys_s);
  std::string per_msg = messages ? std::to_string(cpu_s * 1e6 / static_cast<double>(messages)) : "null";
  char head[320];
  snprintf(head, sizeof(head),
           "{\"devices\":%u,\"simulated\":true,\"transport\":%s,\"samples\":%u,\"payload\":%u,\"interval_ms\":%.3f,"
           "\"qos\":%u,\"connect_rate\":%g,\"seed\":%" PRIu64 ",\"processes\":%d,",
           o.share_size(), json_string(o.conn.config.transport).c_str(), o.conn.publish.samples,
           static_cast<unsigned>(o.conn.publish.payload_size), static_cast<double>(o.conn.publish.interval_us) / 1000.0,
           static_cast<unsigned>(o.conn.publish.qos), o.connect_rate(), o.conn.config.seed, r.cpu.processes);
  char tail[160];
  snprintf(tail, sizeof(tail), ",\"max_rss_kb\":%ld,\"wall_s\":%.3f,\"interrupted\":%s,\"keylog_ok\":%s", r.cpu.max_rss_kb,
           r.wall_s, r.interrupted ? "true" : "false", r.keylog_failed ? "false" : "true");
  const std::string text = std::string(head) + share_fields(o, r) + counts + ",\"messages_expected\":" +
                           std::to_string(static_cast<uint64_t>(o.share_size()) * o.conn.publish.samples) +
                           ",\"tls_library\":" + json_string(vdev::tls_library()) +
                     ",\"cpu_model\":" + json_string(vdev::cpu_model()) +
                           ",\"tls13_padding_granularity\":" + vdev::tls13_padding_granularity_json() +
                           ",\"schedule_lag_us\":" + lag_json(r.lag) + ",\"steady_lag_us\":" + lag_json(r.steady) + "," +
                           cpu + per_msg + tail + "}\n";
  return write_atomic(o.out_dir() + "/summary.json", text, error);
}

}  // namespace fleet
