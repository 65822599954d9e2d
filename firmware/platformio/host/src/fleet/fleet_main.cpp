// fleet: N virtual ESP32s against one broker. Every device is the firmware's unchanged core Publisher
// (PlainTcp or TlsTransport, simulated sensors) in its own std::thread; see fleet_device.h, fleet_shard.h.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "fleet_device.h"
#include "fleet_share.h"
#include "host_util.h"
#include "fleet_shard.h"
#include "fleet_summary.h"
#include "plain_tcp.h"
#include "publisher.h"
#include "resolve.h"
#include "sim_sensors.h"

namespace fleet {
namespace {

using vdev::read_file;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSignal = 130;
constexpr size_t kThreadStack = 256 * 1024;  // the core's stack needs are an ESP32 task's (a few KiB)

int fail(int code, const char* name, const std::string& message) {
  fprintf(stderr, "fleet: error %s: %s\n", name, message.c_str());
  return code;
}

struct Pem {
  std::string ca, cert, key;
};

bool read_pem(const vdev::Options& o, Pem* pem, std::string* error) {
  if (!o.tls()) return true;
  if (!read_file(o.config.ca, "--ca", &pem->ca, error)) return false;
  if (*o.config.cert == '\0') return true;
  return read_file(o.config.cert, "--cert", &pem->cert, error) && read_file(o.config.key, "--key", &pem->key, error);
}

class NoObserver : public tb::SendObserver {
 public:
  bool on_sent(uint32_t, int64_t, size_t, size_t, int64_t) override { return true; }
};

// What every device would refuse, refused once: payload, topic, client id, cipher names, the CA.
tb::Err check_config(const FleetOptions& o, const Pem& pem, std::string* error) {
  StopSignal stop;
  FleetClock clock(stop);
  tb::PlainTcp tcp(clock);
  vdev::SimulatedSensors sensors(1);
  NoObserver none;
  std::unique_ptr<tb::Publisher> pub(new tb::Publisher(tcp, clock, sensors, none));
  const std::string id = o.id(o.devices() - 1);  // the fleet's longest (its ids are all as wide)
  tb::PublishConfig cfg = o.conn.publish;  // what each device runs (fleet_device.cpp), with the longest id
  cfg.device_id = cfg.client_id = id.c_str();
  tb::Err e = pub->validate(cfg);
  *error = pub->error_text();
  if (e != tb::Err::Ok) return e;
  return vdev::check_tls(o.conn, pem.ca, error);
}

// The broker's IPv4 address, resolved once for all devices; the name itself when that fails (each device
// then reports the Dns error).
std::string resolve_once(const vdev::Options& o) {
  int rc = 0;
  addrinfo* res = tb::resolve_ipv4(o.publish.host, o.publish.port, SOCK_STREAM, &rc);
  if (res == nullptr) return o.publish.host;
  char buf[INET_ADDRSTRLEN] = {0};
  const auto* sin = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  const bool ok = inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) != nullptr;
  freeaddrinfo(res);
  return ok ? std::string(buf) : std::string(o.publish.host);
}

bool make_dir(const std::string& path, std::string* error) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "cannot create --out-dir " + part + ": " + strerror(errno);
      return false;
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "--out-dir " + path + " is not a directory";
    return false;
  }
  return true;
}

// SIGINT/SIGTERM blocked in every thread (taken by sigtimedwait in run_devices); SIGPIPE ignored.
void setup_process() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) == 0) {
    if (pthread_attr_setstacksize(&attr, kThreadStack) == 0) pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
  }
}

void print_start(const FleetOptions& o, const std::string& host, uint32_t processes, const StartAt& start) {
  const tb::PublishConfig& c = o.conn.publish;
  if (c.mode != tb::ConnectionMode::Persistent) {
    fprintf(stdout, "fleet: connection %s every %u message(s), close %s, asleep %.3f ms between connections%s\n",
            tb::connection_mode_name(c.mode), c.per_connection, tb::close_mode_name(c.close),
            static_cast<double>(c.sleep_us ? c.sleep_us : c.interval_us) / 1000.0, c.sleep_us ? "" : " (one interval)");
  }
  if (o.weights.size() > 1) {
    fprintf(stdout, "fleet: share %u of weights %s: %u of the fleet's %u devices (%s..%s)\n", o.share_index(),
            weights_text(o.weights).c_str(), o.share_size(), o.devices(),
            o.share.empty() ? "-" : o.id(o.share.front()).c_str(), o.share.empty() ? "-" : o.id(o.share.back()).c_str());
  }
  fprintf(stdout, "fleet: device 0's slot at %" PRId64 " us (this host's clock, %s, in %.3f ms)\n", start.at_us,
          start.given ? "--start-at-us" : "now + 10 ms", static_cast<double>(start.lead_us) / 1000.0);
  fprintf(stdout, "fleet: %u devices %s..%s (SIMULATED sensors, seed %" PRIu64 ") -> %s:%u %s, %u x %u B every "
          "%.3f ms, qos %u, connect rate %g/s, %u process(es), logs in %s\n",
          o.devices(), o.id(0).c_str(), o.id(o.devices() - 1).c_str(),
          o.conn.config.seed, host.c_str(), static_cast<unsigned>(c.port), o.conn.config.transport, c.samples,
          static_cast<unsigned>(c.payload_size), static_cast<double>(c.interval_us) / 1000.0,
          static_cast<unsigned>(c.qos), o.connect_rate(), processes, o.out_dir().c_str());
  fflush(stdout);
}

// The exit code, with the one-line error when not 0.
int report(const FleetOptions& o, const FleetOutcome& r, const std::string& write_error) {
  uint32_t connected = 0, failed = 0;
  uint64_t messages = 0;
  const DeviceResult* first = nullptr;
  for (const DeviceResult& d : r.devices) {
    connected += d.connected ? 1 : 0;
    messages += d.messages;
    if (!d.error.empty() && (failed++ == 0)) first = &d;
  }
  const double cpu = r.cpu.user_s + r.cpu.sys_s;
  fprintf(stdout, "fleet: %u of %u devices connected, %u failed, %" PRIu64 " messages; schedule lag p50 %" PRId64
          " us p99 %" PRId64 " us max %" PRId64 " us; CPU %.3f s (%.1f us/message), max RSS %ld kB\n",
          connected, o.share_size(), failed, messages, r.lag.p50, r.lag.p99, r.lag.max, cpu,
          messages ? cpu * 1e6 / static_cast<double>(messages) : 0.0, r.cpu.max_rss_kb);
  fflush(stdout);
  if (r.interrupted) {
    return fail(kExitSignal, "Interrupted", "stopped by a signal after " + std::to_string(messages) +
                " messages; the logs are written");
  }
  if (!write_error.empty()) return fail(kExitFailure, "SendLog", write_error);
  if (r.keylog_failed) {
    return fail(kExitFailure, "Keylog", std::string("writing the key log ") + o.conn.config.keylog + " failed");
  }
  if (first == nullptr) return 0;
  return fail(kExitFailure, first->error.c_str(), std::to_string(failed) + " of " + std::to_string(o.share_size()) +
              " devices failed (first: " + o.id(first->index) + ": " + first->message + ")");
}

int run_fleet_main(const FleetOptions& o, const Pem& pem, uint32_t shards, const StartAt& start, int64_t mono_base) {
  std::string error;
  if (!make_dir(o.out_dir(), &error)) return fail(kExitUsage, "SendLog", error);
  SharedKeylog keylog;
  if (*o.conn.config.keylog != '\0' && !keylog.open(o.conn.config.keylog, &error)) {
    return fail(kExitUsage, "Keylog", error);
  }
  StopSignal stop;
  LogWriter logs;
  if (*o.conn.config.connections_log != '\0' && !start_connections_log(logs, o.conn.config.connections_log, &error)) {
    return fail(kExitUsage, "SendLog", error);
  }
  FleetPlan plan;
  plan.options = &o;
  plan.host = resolve_once(o.conn);
  plan.tls.ca_pem = pem.ca.c_str();
  plan.tls.client_cert_pem = pem.cert.empty() ? nullptr : pem.cert.c_str();
  plan.tls.client_key_pem = pem.key.empty() ? nullptr : pem.key.c_str();
  plan.tls.server_name = (*o.conn.config.server_name == '\0') ? o.conn.config.host : o.conn.config.server_name;
  plan.tls.ciphers = o.conn.config.ciphers;
  plan.keylog = (*o.conn.config.keylog == '\0') ? nullptr : &keylog;
  plan.tls.keylog = plan.keylog;
  plan.stop = &stop;
  plan.logs = &logs;
  print_start(o, plan.host, shards == 1 ? 1 : shards + 1, start);
  const int64_t t0 = mono_now_us();
  plan.mono_base_us = mono_base;
  FleetOutcome r;
  r.start = start;
  r.interrupted = run_fleet(plan, shards, &r.devices, &r.cpu, &r.keylog_failed) != 0;
  r.wall_s = static_cast<double>(mono_now_us() - t0) / 1e6;
  std::string write_error;
  if (!read_lags(o, &r, &error)) write_error = error;
  if (!write_connections(o, r.devices, &error) && write_error.empty()) write_error = error;
  if (!write_summary(o, r, &error) && write_error.empty()) write_error = error;
  return report(o, r, write_error);
}

// Device 0's slot: --start-at-us T mapped once onto CLOCK_MONOTONIC by the realtime clock's distance to T (or now
// + 10 ms); false with the error when T is more than kStartLateToleranceUs past or kStartAheadMaxUs ahead.
bool plan_start(const FleetOptions& o, StartAt* start, int64_t* mono_base, std::string* error) {
  const int64_t mono = mono_now_us(), wall = wall_now_us();
  start->given = o.start_at_us() != 0;
  start->at_us = start->given ? o.start_at_us() : wall + 10000;
  start->lead_us = start->at_us - wall;
  *mono_base = mono + start->lead_us;
  char text[256];
  if (start->lead_us < -kStartLateToleranceUs) {
    snprintf(text, sizeof(text), "--start-at-us %" PRId64 " is %.3f ms past on this host's clock (CLOCK_REALTIME %"
             PRId64 "); at most %" PRId64 " ms late is started: give a later start", start->at_us,
             static_cast<double>(-start->lead_us) / 1000.0, wall, kStartLateToleranceUs / 1000);
  } else if (start->lead_us > kStartAheadMaxUs) {
    snprintf(text, sizeof(text), "--start-at-us %" PRId64 " is %.0f s ahead of this host's clock (CLOCK_REALTIME %"
             PRId64 "); at most %" PRId64 " s ahead is waited for (epoch microseconds)", start->at_us,
             static_cast<double>(start->lead_us) / 1e6, wall, kStartAheadMaxUs / 1000000);
  } else {
    return true;
  }
  *error = text;
  return false;
}

// The worker processes the share needs and the limits they need; 0 with the error.
uint32_t plan_processes(const FleetOptions& o, std::string* error) {
  const long open_fds = count_open_fds() + ((*o.conn.config.keylog == '\0') ? 0 : 1);
  const uint32_t cap = devices_per_process(open_fds);
  const uint32_t n = o.share_size() > 0 ? o.share_size() : 1;
  const uint32_t shards = (n + cap - 1) / cap;
  const uint32_t per_process = (n + shards - 1) / shards;
  const std::string what = o.weights.size() == 1 ? "--devices " + std::to_string(o.devices())
                                                : "share " + std::to_string(o.share_index()) + "'s " +
                                                      std::to_string(o.share_size()) + " devices";
  return ensure_limits(what, n, per_process, open_fds, error) ? shards : 0;
}

// What the modes print (--help, --describe-options, --show-config, --describe-share); -1: none asked.
int print_mode(const FleetOptions& o, const FleetMode& mode) {
  if (mode.common.help || mode.common.describe) {
    fputs(mode.common.help ? fleet_usage().c_str() : vdev::describe_options().c_str(), stdout);
  } else if (mode.common.show) {
    fputs(vdev::config_json(o.conn.config).c_str(), stdout);
  } else if (mode.describe_share) {
    fputs(share_json(o).c_str(), stdout);
  } else {
    return -1;
  }
  return 0;
}

int run(int argc, char** argv) {
  setup_process();
  FleetOptions o;
  std::string error;
  FleetMode mode;
  if (!parse_fleet_options(argc, argv, &o, &error, &mode)) return fail(kExitUsage, "InvalidArgument", error);
  const int printed = print_mode(o, mode);
  if (printed >= 0) return printed;
  Pem pem;
  if (!read_pem(o.conn, &pem, &error)) return fail(kExitUsage, "InvalidArgument", error);
  const tb::Err e = check_config(o, pem, &error);
  if (e != tb::Err::Ok) return fail(kExitUsage, tb::err_name(e), error);
  if (!check_share_size(o, &error)) return fail(kExitUsage, "InvalidArgument", error);
  if (mode.common.check) {
    fputs("ok\n", stdout);
    return 0;
  }
  const uint32_t shards = plan_processes(o, &error);
  if (shards == 0) return fail(kExitUsage, "InvalidArgument", error);
  StartAt start;
  int64_t mono_base = 0;
  if (!plan_start(o, &start, &mono_base, &error)) return fail(kExitUsage, "InvalidArgument", error);
  return run_fleet_main(o, pem, shards, start, mono_base);
}

}  // namespace
}  // namespace fleet

int main(int argc, char** argv) { return fleet::run(argc, argv); }
