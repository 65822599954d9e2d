// board-emu: an emulated ESP32 on a pseudo-terminal. It speaks the serial control protocol of the
// real firmware (lib/testbed_core/src/board_session.h) with the host's sockets, mbedTLS and
// simulated sensors, so the orchestrator's serial path can be tested without a board.
//   board-emu [--pty-link PATH] [--rx-buffer 256] [--clock-offset-us N] [--drift-ppm X] ...
// stdout: one line "PTY /dev/pts/N" once the port exists; diagnostics on stderr.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "board_session.h"
#include "drift_clock.h"
#include "emu_port.h"
#include "host_util.h"
#include "net_path.h"
#include "options.h"
#include "path_datagram.h"
#include "path_transport.h"
#include "posix_clock.h"
#include "posix_udp.h"
#include "pty_stream.h"
#include "sim_sensors.h"

namespace vdev {
namespace {

volatile sig_atomic_t g_stop = 0;       // the session's stop flag: a signal, or a reset
volatile sig_atomic_t g_terminate = 0;  // a signal: leave

void on_signal(int) {
  g_terminate = 1;
  g_stop = 1;
}

void install_signal_handlers() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

struct EmuOptions {
  std::string pty_link;
  size_t rx_buffer = 256;
  int64_t clock_offset_us = 0;
  double drift_ppm = 0.0;
  uint32_t send_jitter_us = 0;
  uint32_t path_up_us = 0;
  uint32_t path_up_jitter_us = 0;
  uint32_t path_down_us = 0;
  uint32_t path_down_jitter_us = 0;
  std::string truth_log;
  std::string check_run;  // --check-run FILE
  bool show_run = false;  // --show-run FILE: its configuration as JSON instead of ok
  uint64_t seed = 1;
  uint32_t boot_ms = 200;
  bool reset_on_open = true;
  bool no_clock_replies = false;
  uint64_t reboot_after = 0;
  uint64_t exit_after = 0;
  uint64_t drop_after = 0;
  int64_t down_ms = 0;  // 0: the dropped network stays down
  tb::BoardInfo info;
  std::string banner_strings[12];  // storage behind info's pointers
  bool rx_buf_overridden = false;
};

std::string usage() {  // the defaults are EmuOptions' (tests/firmware/test_usage_defaults.py finds one written here)
  const EmuOptions d;
  return "usage: board-emu [options]\n"
    "  --pty-link PATH            also make PATH a symlink to the pty's slave\n"
    "  --rx-buffer N              serial receive buffer in bytes (" + std::to_string(d.rx_buffer) +
    ", like Arduino); overflow is dropped\n"
    "  --clock-offset-us N        the board's wall clock runs N us ahead of the host's\n"
    "  --drift-ppm X              the board's clock runs X ppm fast (negative: slow)\n"
    "  --send-jitter-us N         random extra delay 0..N us before each write to the broker\n"
    "  --path-up-us D             emulated path board -> lab: hold every clock request and every write\n"
    "                             to the broker D us (userspace delay line, FIFO)\n"
    "  --path-up-jitter-us J      ... plus a delay drawn uniformly from [0, J] us per packet\n"
    "  --path-down-us D           emulated path lab -> board: hold every clock reply and every read\n"
    "                             from the broker D us\n"
    "  --path-down-jitter-us J    ... plus a delay drawn uniformly from [0, J] us per packet\n"
    "  --truth-log PATH           ground truth CSV (mode 0600): kind,seq,true_us,board_us per PUBLISH\n"
    "                             (send, due, wire) and per clock exchange (t1, t4)\n"
    "  --seed N                   seed of the simulated sensors, the send jitter and the path (" +
    std::to_string(d.seed) + ")\n"
    "  --boot-ms N                delay from reset to BANNER (" + std::to_string(d.boot_ms) + ")\n"
    "  --no-reset-on-open         the board does not reset when the host opens the port (send HELLO)\n"
    "  --no-clock-replies         the clock requests go out, no reply comes back (a firewall on the time-echo port)\n"
    "  --reboot-after-messages N  reset after the N-th MSG line (the BANNER comes again)\n"
    "  --exit-after-messages N    close the port after the N-th MSG line, as if unplugged\n"
    "  --network-drop-after-messages N  the board's network (WiFi) goes down after the N-th MSG line: the\n"
    "                             path drops everything both ways for good (reads, connects time out)\n"
    "  --network-down-ms D        ... for D ms only: then new connections go through (the old one is dead)\n"
    "  --banner-KEY VALUE         BANNER override, KEY one of proto board chip mac fw arduino idf mbedtls\n"
    "                             cpu-mhz wifi-ps hw-crypto sw-crypto rx-buf device\n"
    "  --check-run FILE           check a RUN body (key=value lines, escaped as on the wire) with the\n"
    "                             board's own parser and checks before `ACK run`; print ok (exit 0) or the\n"
    "                             error (exit 2); no pty, nothing sent\n"
    "  --show-run FILE            as --check-run, printing the RUN's configuration (JSON) instead of ok\n";
}

bool parse_int(const char* s, long long min, long long max, long long* out) {
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

bool set_banner(EmuOptions* o, const std::string& key, const char* value) {
  static const char* const kStrings[] = {"board", "chip", "mac", "fw", "arduino", "idf",
                                         "mbedtls", "wifi-ps", "hw-crypto", "sw-crypto", "device"};
  const char** fields[] = {&o->info.board,   &o->info.chip,    &o->info.mac,       &o->info.fw,
                           &o->info.arduino, &o->info.idf,     &o->info.mbedtls,   &o->info.wifi_ps,
                           &o->info.hw_crypto, &o->info.sw_crypto, &o->info.device_id};
  for (size_t i = 0; i < sizeof(kStrings) / sizeof(kStrings[0]); ++i) {
    if (key == kStrings[i]) {
      o->banner_strings[i] = value;
      *fields[i] = o->banner_strings[i].c_str();
      return true;
    }
  }
  long long n = 0;
  if (!parse_int(value, 0, 1000000, &n)) return false;
  if (key == "proto") {
    o->info.protocol = static_cast<uint32_t>(n);
  } else if (key == "cpu-mhz") {
    o->info.cpu_mhz = static_cast<uint32_t>(n);
  } else if (key == "rx-buf") {
    o->info.rx_buf = static_cast<uint32_t>(n);
    o->rx_buf_overridden = true;
  } else {
    return false;
  }
  return true;
}

bool parse_number_option(EmuOptions* o, const std::string& a, const char* v) {
  long long n = 0;
  if (a == "--rx-buffer" && parse_int(v, 16, 65536, &n)) {
    o->rx_buffer = static_cast<size_t>(n);
  } else if (a == "--clock-offset-us" && parse_int(v, -(1LL << 50), 1LL << 50, &n)) {
    o->clock_offset_us = n;
  } else if (a == "--send-jitter-us" && parse_int(v, 0, 10000000, &n)) {
    o->send_jitter_us = static_cast<uint32_t>(n);
  } else if (a == "--path-up-us" && parse_int(v, 0, 10000000, &n)) {
    o->path_up_us = static_cast<uint32_t>(n);
  } else if (a == "--path-up-jitter-us" && parse_int(v, 0, 10000000, &n)) {
    o->path_up_jitter_us = static_cast<uint32_t>(n);
  } else if (a == "--path-down-us" && parse_int(v, 0, 10000000, &n)) {
    o->path_down_us = static_cast<uint32_t>(n);
  } else if (a == "--path-down-jitter-us" && parse_int(v, 0, 10000000, &n)) {
    o->path_down_jitter_us = static_cast<uint32_t>(n);
  } else if (a == "--seed" && parse_int(v, 0, INT64_MAX, &n)) {
    o->seed = static_cast<uint64_t>(n);
  } else if (a == "--boot-ms" && parse_int(v, 0, 60000, &n)) {
    o->boot_ms = static_cast<uint32_t>(n);
  } else if (a == "--reboot-after-messages" && parse_int(v, 1, INT64_MAX, &n)) {
    o->reboot_after = static_cast<uint64_t>(n);
  } else if (a == "--exit-after-messages" && parse_int(v, 1, INT64_MAX, &n)) {
    o->exit_after = static_cast<uint64_t>(n);
  } else if (a == "--network-drop-after-messages" && parse_int(v, 1, INT64_MAX, &n)) {
    o->drop_after = static_cast<uint64_t>(n);
  } else if (a == "--network-down-ms" && parse_int(v, 1, 3600000, &n)) {
    o->down_ms = n;
  } else if (a == "--drift-ppm") {
    char* end = nullptr;
    o->drift_ppm = strtod(v, &end);
    return end != v && *end == '\0' && o->drift_ppm > -1e5 && o->drift_ppm < 1e5;
  } else {
    return false;
  }
  return true;
}

void default_info(EmuOptions* o) {
  o->info.board = "emulated";
  o->info.chip = "board-emu";
  o->info.mac = "02:00:00:00:00:01";
  o->info.fw = "board-emu";
  o->info.cpu_mhz = 0;
  o->info.wifi_ps = "none";
  o->info.hw_crypto = "none";  // the host's CPU runs all of mbedTLS in software
  o->info.sw_crypto = "all";
  o->info.device_id = "e1";
}

// 0: ok, 1: --help, 2: bad options (error set).
int parse(int argc, char** argv, EmuOptions* o, std::string* error) {
  default_info(o);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return 1;
    if (a == "--no-reset-on-open") {
      o->reset_on_open = false;
      continue;
    }
    if (a == "--no-clock-replies") {
      o->no_clock_replies = true;
      continue;
    }
    if (i + 1 >= argc) {
      *error = a + ": needs a value (or is unknown; see --help)";
      return 2;
    }
    const char* v = argv[++i];
    bool ok = a == "--pty-link"    ? (o->pty_link = v, !o->pty_link.empty())
              : a == "--truth-log" ? (o->truth_log = v, !o->truth_log.empty())
              : a == "--check-run" ? (o->check_run = v, !o->check_run.empty())
              : a == "--show-run"  ? (o->check_run = v, o->show_run = true, !o->check_run.empty())
              : a.rfind("--banner-", 0) == 0 ? set_banner(o, a.substr(9), v)
                                              : parse_number_option(o, a, v);
    if (!ok) {
      *error = a + " " + v + ": unknown option or bad value (see --help)";
      return 2;
    }
  }
  if (!o->rx_buf_overridden) o->info.rx_buf = static_cast<uint32_t>(o->rx_buffer);
  return 0;
}

// The truth log's comment line: everything injected, so the log alone says what to expect.
std::string truth_comment(const EmuOptions& o) {
  char text[640];
  snprintf(text, sizeof(text),
           "board-emu truth log v1: clock_offset_us=%" PRId64 " drift_ppm=%.6f path_up_us=%" PRIu32
           " path_up_jitter_us=%" PRIu32 " path_down_us=%" PRIu32 " path_down_jitter_us=%" PRIu32
           " jitter=uniform fifo=1 send_jitter_us=%" PRIu32 " seed=%" PRIu64
           " true=CLOCK_REALTIME board=true+offset+drift*elapsed",
           o.clock_offset_us, o.drift_ppm, o.path_up_us, o.path_up_jitter_us, o.path_down_us,
           o.path_down_jitter_us, o.send_jitter_us, o.seed);
  return text;
}

// The serial line of --check-run: nothing arrives, what the session writes is dropped.
class NoStream : public tb::ByteStream {
 public:
  tb::Err read(uint8_t*, size_t, size_t*, uint32_t) override { return tb::Err::PeerClosed; }
  tb::Err write(const uint8_t*, size_t) override { return tb::Err::Ok; }
};

// --check-run FILE: the RUN body through BoardSession::check_run, as the board meets it before `ACK run`.
int check_run(const EmuOptions& o) {
  std::string body, error;
  if (!read_file(o.check_run, "--check-run", &body, &error)) {
    fprintf(stderr, "board-emu: error InvalidArgument: %s\n", error.c_str());
    return 2;
  }
  if (body.size() > tb::proto::kMaxBody) {
    fprintf(stderr, "board-emu: error BodyTooLarge: the RUN body has %zu bytes, the board takes %zu\n", body.size(),
            tb::proto::kMaxBody);
    return 2;
  }
  PosixClock clock(&g_stop);
  SimulatedSensors sensors(o.seed);
  EmuPort port(0, o.seed);
  PosixUdp udp;
  NoStream none;
  std::unique_ptr<tb::BoardSession> session(new tb::BoardSession(none, clock, sensors, port, o.info, &udp));
  std::vector<char> text(body.begin(), body.end());
  text.push_back('\0');
  tb::DeviceConfig run(TB_BOARD);
  const tb::Err e = session->check_run(text.data(), body.size(), &run);
  if (e != tb::Err::Ok) {
    fprintf(stderr, "board-emu: error %s: %s\n", tb::err_name(e), session->error_text());
    return 2;
  }
  fputs(o.show_run ? vdev::config_json(run).c_str() : "ok\n", stdout);
  return 0;
}

void sleep_ms(uint32_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

bool make_link(const std::string& link, const std::string& target, std::string* error) {
  struct stat st;
  if (lstat(link.c_str(), &st) == 0) {
    if (!S_ISLNK(st.st_mode)) {
      *error = "--pty-link " + link + " exists and is no symlink";
      return false;
    }
    unlink(link.c_str());
  }
  if (symlink(target.c_str(), link.c_str()) != 0) {
    *error = "--pty-link " + link + ": " + strerror(errno);
    return false;
  }
  return true;
}

// The MSG lines the session writes, counted, and the faults the --*-after-messages options inject on them.
struct MessageFaults {
  uint64_t messages = 0;
  bool unplug = false;
};

void inject_faults(const EmuOptions& o, PtyStream* pty, NetPath* path, tb::Clock* host, MessageFaults* f) {
  pty->set_line_observer([&o, pty, path, host, f](const std::string& line) {
    if (line.rfind(tb::proto::kLineMsg, 0) != 0 || line[3] != ' ') return;
    const uint64_t messages = ++f->messages;
    if (o.reboot_after != 0 && messages == o.reboot_after) {
      fprintf(stderr, "board-emu: reset after %" PRIu64 " messages (--reboot-after-messages)\n", messages);
      pty->request_reset();
      g_stop = 1;
    }
    if (o.drop_after != 0 && messages == o.drop_after) {
      fprintf(stderr, "board-emu: network down after %" PRIu64 " messages (--network-drop-after-messages)\n",
              messages);
      path->dropped = true;
      if (o.down_ms != 0) path->back_at_mono_us = host->mono_us() + o.down_ms * 1000;
    }
    if (o.exit_after != 0 && messages == o.exit_after) {
      fprintf(stderr, "board-emu: unplugged after %" PRIu64 " messages (--exit-after-messages)\n", messages);
      f->unplug = true;
      pty->request_reset();  // mutes the output: nothing after this line reaches the host
      g_stop = 1;
    }
  });
}

// What a BoardSession runs on besides the pty; path_tcp is null when no path is emulated.
struct Board {
  tb::Clock* clock;
  tb::SensorSource* sensors;
  tb::BoardPort* port;
  tb::Datagram* sync;
  PathTransport* path_tcp;
};

// Boots the board when the host opens the port (or at once with --no-reset-on-open) and after every reset,
// and serves the session until a signal, an unplug or the host's end of the line.
void serve(const EmuOptions& o, PtyStream& pty, const Board& board, const MessageFaults& faults) {
  std::unique_ptr<tb::BoardSession> session;
  auto boot = [&]() {
    session.reset();
    sleep_ms(o.boot_ms);
    pty.reset_done();
    if (!g_terminate) g_stop = 0;
    session.reset(new tb::BoardSession(pty, *board.clock, *board.sensors, *board.port, o.info, board.sync));
    session->set_stop_flag(&g_stop);
    if (board.path_tcp != nullptr) session->set_transport_filter(board.path_tcp);
    session->boot();
  };
  if (!o.reset_on_open) boot();
  while (!g_terminate && !faults.unplug) {
    if (pty.reset_pending() || (o.reset_on_open && !session && pty.host_connected())) {
      boot();
      continue;
    }
    if (!session) {
      pty.wait_host(100);
      continue;
    }
    if (session->poll(100) == tb::Err::PeerClosed) break;
  }
  if (faults.unplug) sleep_ms(300);  // let the host read the last lines before the line goes dead
}

int run(int argc, char** argv) {
  EmuOptions o;
  std::string error;
  int parsed = parse(argc, argv, &o, &error);
  if (parsed == 1) {
    fputs(usage().c_str(), stdout);
    return 0;
  }
  if (parsed == 2) {
    fprintf(stderr, "board-emu: error InvalidArgument: %s\n", error.c_str());
    return 2;
  }
  if (!o.check_run.empty()) return check_run(o);
  NetPath path(o.path_up_us, o.path_up_jitter_us, o.path_down_us, o.path_down_jitter_us, o.seed);
  TruthLog truth;
  if (!o.truth_log.empty() && !truth.open(o.truth_log, truth_comment(o), &error)) {
    fprintf(stderr, "board-emu: error InvalidArgument: %s\n", error.c_str());
    return 2;
  }
  const bool emulate_path = path.active() || !o.truth_log.empty() || o.drop_after != 0 || o.no_clock_replies;
  // The path's holds are timed sleeps: without this, Linux may wake them 50 us late (timer slack).
  if (emulate_path) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  PtyStream pty(o.rx_buffer, o.reset_on_open);
  if (!pty.open(&error) || (!o.pty_link.empty() && !make_link(o.pty_link, pty.slave_path(), &error))) {
    fprintf(stderr, "board-emu: error Socket: %s\n", error.c_str());
    return 1;
  }
  install_signal_handlers();
  printf("PTY %s\n", pty.slave_path().c_str());
  fflush(stdout);
  PosixClock host_clock(&g_stop);
  MessageFaults faults;
  inject_faults(o, &pty, &path, &host_clock, &faults);

  DriftClock clock(host_clock, o.clock_offset_us, o.drift_ppm);
  SimulatedSensors sensors(o.seed);
  EmuPort port(o.send_jitter_us, o.seed);
  PosixUdp udp;
  TruthLog* truth_log = o.truth_log.empty() ? nullptr : &truth;
  PathDatagram path_udp(udp, host_clock, clock, path, truth_log);
  path_udp.drop_replies = o.no_clock_replies;
  PathTransport path_tcp(host_clock, clock, path, truth_log);
  if (emulate_path) clock.set_sleep_work(&path_tcp);
  tb::Datagram* sync = emulate_path ? static_cast<tb::Datagram*>(&path_udp) : &udp;
  serve(o, pty, Board{&clock, &sensors, &port, sync, emulate_path ? &path_tcp : nullptr}, faults);
  pty.close();
  if (!o.pty_link.empty()) unlink(o.pty_link.c_str());
  fprintf(stderr, "board-emu: exit (%" PRIu64 " messages, %" PRIu64 " bytes dropped)\n", faults.messages,
          pty.dropped());
  return 0;
}

}  // namespace
}  // namespace vdev

int main(int argc, char** argv) { return vdev::run(argc, argv); }
