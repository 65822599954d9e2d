// vdevice: the virtual ESP32. Runs the firmware's portable core on Linux with simulated sensors.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/resource.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "connection_log.h"
#include "emulated_sleep.h"
#include "host_util.h"
#include "mbedtls/version.h"
#include "options.h"
#include "posix_clock.h"
#include "sim_sensors.h"
#include "testbed_core.h"

namespace vdev {
namespace {

volatile sig_atomic_t g_stop = 0;

void on_signal(int) { g_stop = 1; }

// SIGTERM (docker stop) and SIGINT end the run early but still write the summary.
void install_signal_handlers() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a sleep must wake up
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Line-buffered file sink; remembers the first write error.
class LineFile {
 public:
  // mode: for a new file (0600 for secrets such as the TLS key log); an existing one is set to it too
  bool open(const std::string& path, const char* what, std::string* error, mode_t mode = 0644) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd >= 0 && fchmod(fd, mode) != 0) {
      ::close(fd);
      fd = -1;
    }
    f_ = fd >= 0 ? fdopen(fd, "w") : nullptr;
    if (f_ == nullptr) {
      if (fd >= 0) ::close(fd);
      *error = std::string("cannot open ") + what + " " + path + ": " + strerror(errno);
      return false;
    }
    return true;
  }
  bool line(const char* text) {
    if (f_ == nullptr) return false;
    if (fputs(text, f_) < 0 || fputc('\n', f_) == EOF || fflush(f_) != 0) failed_ = true;
    return !failed_;
  }
  bool failed() const { return failed_; }
  ~LineFile() {
    if (f_ != nullptr) fclose(f_);
  }

 private:
  FILE* f_ = nullptr;
  bool failed_ = false;
};

class KeylogFile : public tb::KeylogSink {
 public:
  explicit KeylogFile(LineFile& f) : f_(f) {}
  void write_line(const char* line) override { f_.line(line); }

 private:
  LineFile& f_;
};

// The send log (a row per PUBLISH) and the connections log (a row per connection); either may be absent.
class SendLog : public tb::SendObserver {
 public:
  // acks: QoS 1/2, the rows get ack_us (the time to PUBACK / PUBCOMP on the monotonic clock, empty when
  // none came) and mqtt_bytes (the PUBLISH's bytes).
  SendLog(LineFile* sends, LineFile* connections, bool acks) : f_(sends), conn_(connections), acks_(acks) {}
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes, int64_t ack_us) override {
    if (f_ == nullptr) return true;
    char line[128];
    int n = snprintf(line, sizeof(line), "%" PRIu32 ",%" PRId64 ",%zu", seq, t_send_us, payload_bytes);
    if (acks_ && ack_us >= 0) snprintf(line + n, sizeof(line) - n, ",%" PRId64 ",%zu", ack_us, mqtt_bytes);
    if (acks_ && ack_us < 0) snprintf(line + n, sizeof(line) - n, ",,%zu", mqtt_bytes);
    return f_->line(line);
  }
  void on_connection(const tb::ConnectionStats& c) override {
    if (conn_ == nullptr) return;
    char line[320];
    format_connection_row(c, line, sizeof(line));
    conn_->line(line);  // a failed write is reported at the end (LineFile::failed)
  }

 private:
  LineFile* f_;
  LineFile* conn_;
  bool acks_;
};

// Peak resident set size of this process image. VmHWM restarts at exec; ru_maxrss would carry the
// high-water mark of the parent that forked us (e.g. a Python test runner).
long peak_rss_kb(const rusage& ru) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f != nullptr) {
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f) != nullptr) {
      if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    if (kb >= 0) return kb;
  }
  return ru.ru_maxrss;
}

std::string json_ms(int64_t us) {
  if (us < 0) return "null";
  char buf[32];
  snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(us) / 1000.0);
  return buf;
}

struct Outcome {
  std::string sleep = "null";  // sleep_summary_json
  tb::RunStats stats;
  tb::TransportStats transport;
  std::vector<std::string> errors;
};

bool write_summary(const Options& o, const Outcome& r, std::string* error) {
  rusage ru;
  memset(&ru, 0, sizeof(ru));
  getrusage(RUSAGE_SELF, &ru);
  double user_s = static_cast<double>(ru.ru_utime.tv_sec) + ru.ru_utime.tv_usec / 1e6;
  double sys_s = static_cast<double>(ru.ru_stime.tv_sec) + ru.ru_stime.tv_usec / 1e6;
  const bool tls = o.tls();
  std::string errs = "[";
  for (size_t i = 0; i < r.errors.size(); ++i) errs += (i ? "," : "") + json_string(r.errors[i]);
  errs += "]";
  char cpu[128];
  snprintf(cpu, sizeof(cpu), "\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f,\"max_rss_kb\":%ld", user_s, sys_s,
           peak_rss_kb(ru));
  std::string text = "{\"device_id\":" + json_string(o.publish.device_id) + ",\"simulated\":true,\"transport\":" +
                     json_string(o.config.transport) + ",\"tls_version\":" +
                     (tls && r.transport.tls_version[0] ? json_string(r.transport.tls_version) : "null") +
                     ",\"cipher_suite\":" +
                     (tls && r.transport.cipher_suite[0] ? json_string(r.transport.cipher_suite) : "null") +
                     ",\"tcp_connect_ms\":" + json_ms(r.stats.tcp_connect_us) +
                     ",\"handshake_ms\":" + json_ms(tls ? r.stats.handshake_us : -1) +
                     ",\"connack_ms\":" + json_ms(r.stats.connack_us) +
                     // WebSocket only (a tcp cell's summary is as before): the last connection's HTTP upgrade
                     (o.websocket() ? ",\"mqtt_transport\":\"websocket\",\"ws_upgrade_ms\":" +
                                          json_ms(r.transport.ws_upgrade_us)
                                    : std::string()) +
                     ",\"messages_sent\":" + std::to_string(r.stats.messages_sent) +
                     ",\"connection_mode\":" + json_string(tb::connection_mode_name(o.publish.mode)) +
                     ",\"per_connection\":" + std::to_string(o.publish.per_connection) +
                     ",\"close\":" + json_string(tb::close_mode_name(o.publish.close)) +
                     ",\"connections\":" + std::to_string(r.stats.connections) +
                     ",\"resumed_connections\":" + std::to_string(r.stats.resumed_connections) +
                     ",\"sleep\":" + r.sleep + ",\"qos\":" + std::to_string(o.publish.qos) +
                     ",\"mqtt\":" + json_string(o.publish.mqtt_level == 5 ? "5" : "3.1.1") +
                     ",\"session\":" + json_string(o.publish.clean_session ? "clean" : "persistent") +
                     ",\"inflight\":" + std::to_string(o.publish.inflight) + ",\"reconnects\":" +
                     std::to_string(r.stats.reconnects) + ",\"resent\":" + std::to_string(r.stats.resent) +
                     ",\"lost\":" + std::to_string(r.stats.lost) + ",\"tls_library\":" + json_string(tls_library()) +
                     ",\"cpu_model\":" + json_string(cpu_model()) +
                     ",\"tls13_padding_granularity\":" + tls13_padding_granularity_json() + "," + cpu +
                     ",\"errors\":" + errs + ",\"ok\":" + (r.errors.empty() ? "true" : "false") + "}\n";
  const std::string summary = o.config.summary;
  std::string tmp = summary + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    *error = "cannot write summary " + tmp + ": " + strerror(errno);
    return false;
  }
  bool ok = fputs(text.c_str(), f) >= 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp.c_str(), summary.c_str()) != 0) {
    *error = "cannot write summary " + summary + ": " + strerror(errno);
    return false;
  }
  return true;
}

int fail_usage(const std::string& message) {
  fprintf(stderr, "vdevice: error InvalidArgument: %s\n", message.c_str());
  return kExitUsage;
}

// A configuration problem found after the options parsed: still leaves a summary for the orchestrator.
int fail_config(const Options& o, const std::string& line) {
  Outcome outcome;
  outcome.errors.push_back(line);
  std::string ignored;
  if (*o.config.summary != '\0') write_summary(o, outcome, &ignored);
  fprintf(stderr, "vdevice: error %s\n", line.c_str());
  return kExitUsage;
}

struct Outputs {
  LineFile send, keylog, connections;
};

// Opens the logs the options name; false with the error line ("<ErrName>: ...") for fail_config.
bool open_outputs(const Options& o, Outputs* out, std::string* line) {
  std::string error;
  if (*o.config.send_log != '\0' && !out->send.open(o.config.send_log, "send log", &error)) {
    *line = "SendLog: " + error;
    return false;
  }
  if (*o.config.send_log != '\0') {
    out->send.line(o.publish.qos > 0 ? "seq,t_send_us,bytes,ack_us,mqtt_bytes" : "seq,t_send_us,bytes");
  }
  const char* connections = o.config.connections_log;
  if (*connections != '\0' && !out->connections.open(connections, "connections log", &error)) {
    *line = "SendLog: " + error;
    return false;
  }
  if (*o.config.connections_log != '\0') out->connections.line(kConnectionsLogHeader);
  if (*o.config.keylog != '\0' && !out->keylog.open(o.config.keylog, "key log", &error, 0600)) {
    *line = "Keylog: " + error;
    return false;
  }
  return true;
}

void print_start(const Options& o) {
  char mbed_version[32];  // the API needs at least 18 bytes
  mbedtls_version_get_string_full(mbed_version);
  std::string lifecycle;
  if (o.publish.mode != tb::ConnectionMode::Persistent) {
    lifecycle = std::string(", connection ") + tb::connection_mode_name(o.publish.mode) + " every " +
                std::to_string(o.publish.per_connection) + ", close " + tb::close_mode_name(o.publish.close) +
                (o.publish.sleep_us ? ", asleep " + std::to_string(o.publish.sleep_us / 1000) + " ms between connections"
                                    : "");
  }
  fprintf(stdout, "vdevice %s (SIMULATED sensors, seed %" PRIu64 ") -> %s:%u %s, %u x %u B every %.3f ms, qos %u%s, %s\n",
          o.publish.device_id, o.config.seed, o.publish.host, static_cast<unsigned>(o.publish.port), o.config.transport,
          o.publish.samples, static_cast<unsigned>(o.publish.payload_size),
          static_cast<double>(o.publish.interval_us) / 1000.0, static_cast<unsigned>(o.publish.qos), lifecycle.c_str(),
          mbed_version);
  const std::string note = sleep_emulation_note(o.publish.power_save, o.publish.sleep_mode);
  if (!note.empty()) fprintf(stdout, "vdevice %s: %s", o.publish.device_id, note.c_str());
  fflush(stdout);
}

void print_end(const Options& o, const Outcome& r) {
  fprintf(stdout, "vdevice %s (SIMULATED sensors): sent %" PRIu32 " messages over %s%s%s, tcp %s ms, handshake %s ms, "
          "connack %s ms, %" PRIu32 " connection(s), %" PRIu32 " resumed\n",
          o.publish.device_id, r.stats.messages_sent, o.tls() ? r.transport.tls_version : "plain TCP",
          r.transport.tls_version[0] ? " " : "", r.transport.cipher_suite, json_ms(r.stats.tcp_connect_us).c_str(),
          json_ms(r.stats.handshake_us).c_str(), json_ms(r.stats.connack_us).c_str(), r.stats.connections,
          r.stats.resumed_connections);
}

int publish(const Options& o, const std::string& ca, const std::string& cert, const std::string& key) {
  Outputs files;
  std::string error;
  if (!open_outputs(o, &files, &error)) return fail_config(o, error);
  install_signal_handlers();
  PosixClock clock(&g_stop);
  SimulatedSensors sensors(o.config.seed);
  KeylogFile keylog(files.keylog);
  SendLog send_log(*o.config.send_log == '\0' ? nullptr : &files.send,
                   *o.config.connections_log == '\0' ? nullptr : &files.connections, o.publish.qos > 0);
  tb::TlsOptions tls;
  tls.ca_pem = ca.c_str();
  tls.client_cert_pem = cert.empty() ? nullptr : cert.c_str();
  tls.client_key_pem = key.empty() ? nullptr : key.c_str();
  tls.server_name = *o.config.server_name == '\0' ? nullptr : o.config.server_name;
  tls.ciphers = o.config.ciphers;
  tls.keylog = *o.config.keylog == '\0' ? nullptr : &keylog;
  std::unique_ptr<tb::Transport> stream;
  if (o.tls()) {
    stream.reset(new tb::TlsTransport(clock, tls));
  } else {
    stream.reset(new tb::PlainTcp(clock));
  }
  // --mqtt-transport websocket: MQTT over WebSocket over that stream (ws / wss), its mask keys seeded by --seed
  std::unique_ptr<tb::Transport> ws(o.websocket() ? new tb::WsTransport(*stream, clock, o.config.seed) : nullptr);
  tb::Transport* transport = ws ? ws.get() : stream.get();
  std::unique_ptr<tb::Publisher> publisher(new tb::Publisher(*transport, clock, sensors, send_log));
  const tb::PublishConfig& cfg = o.publish;
  publisher->set_stop_flag(&g_stop);
  EmulatedSleep sleeper(*transport);
  publisher->set_between(&sleeper);
  tb::Err e = publisher->validate(cfg);
  if (e != tb::Err::Ok) return fail_config(o, std::string(tb::err_name(e)) + ": " + publisher->error_text());
  print_start(o);

  Outcome outcome;
  e = publisher->run(cfg, &outcome.stats);
  outcome.transport = transport->stats();
  outcome.sleep = sleep_summary_json(cfg.power_save, cfg.sleep_mode, sleeper);
  if (e != tb::Err::Ok) outcome.errors.push_back(std::string(tb::err_name(e)) + ": " + publisher->error_text());
  if (files.keylog.failed()) {
    outcome.errors.push_back(std::string("Keylog: writing the key log ") + o.config.keylog + " failed");
  }
  if (files.connections.failed()) {
    outcome.errors.push_back(std::string("SendLog: writing the connections log ") + o.config.connections_log + " failed");
  }
  if (*o.config.summary != '\0' && !write_summary(o, outcome, &error)) outcome.errors.push_back("SendLog: " + error);
  if (!outcome.errors.empty()) {
    fprintf(stderr, "vdevice: error %s\n", outcome.errors.front().c_str());
    return kExitFailure;
  }
  print_end(o, outcome);
  return 0;
}

// --check: what the run would refuse before connecting (options, files, payload size, topic, client id,
// cipher names, the CA), refused without a network and without writing anything.
int check(const Options& o, const std::string& ca) {
  PosixClock clock(&g_stop);
  SimulatedSensors sensors(o.config.seed);
  tb::PlainTcp tcp(clock);
  SendLog none(nullptr, nullptr, false);
  std::unique_ptr<tb::Publisher> publisher(new tb::Publisher(tcp, clock, sensors, none));
  tb::Err e = publisher->validate(o.publish);
  std::string error = publisher->error_text();
  if (e == tb::Err::Ok) e = check_tls(o, ca, &error);
  if (e != tb::Err::Ok) {
    fprintf(stderr, "vdevice: error %s: %s\n", tb::err_name(e), error.c_str());
    return kExitUsage;
  }
  fputs("ok\n", stdout);
  return 0;
}

int run(int argc, char** argv) {
  Options o;
  std::string error;
  Mode mode;
  if (!parse_options(argc, argv, &o, &error, &mode)) return fail_usage(error);
  if (mode.help || mode.describe) {
    fputs(mode.help ? usage().c_str() : describe_options().c_str(), stdout);
    return 0;
  }
  if (mode.show) {
    fputs(config_json(o.config).c_str(), stdout);
    return 0;
  }
  std::string ca, cert, key;
  if (o.tls()) {
    if (!read_file(o.config.ca, "--ca", &ca, &error) ||
        (*o.config.cert != '\0' &&
         (!read_file(o.config.cert, "--cert", &cert, &error) || !read_file(o.config.key, "--key", &key, &error)))) {
      return mode.check ? fail_usage(error) : fail_config(o, "InvalidArgument: " + error);
    }
  }
  if (mode.check) return check(o, ca);
  return publish(o, ca, cert, key);
}

}  // namespace
}  // namespace vdev

int main(int argc, char** argv) { return vdev::run(argc, argv); }
