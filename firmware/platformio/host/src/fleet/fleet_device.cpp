#include "fleet_device.h"

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <thread>

#include "plain_tcp.h"
#include "publisher.h"
#include "sim_sensors.h"
#include "websocket.h"

namespace fleet {
namespace {

tb::PublishConfig make_config(const FleetPlan& p, const std::string& id, uint32_t index) {
  tb::PublishConfig cfg = p.options->conn.publish;  // vdevice's, then this device's own
  cfg.host = p.host.c_str();
  cfg.device_id = id.c_str();
  cfg.client_id = id.c_str();
  cfg.reconnect_seed = mix64(p.options->conn.config.seed ^ mix64(0xBAC0FFULL + index));  // each device its own jitter
  return cfg;
}

// The core's run of one device; its outcome into r.
void publish(const FleetPlan& p, const std::string& id, uint32_t index, FleetClock& clock, DeviceLog& log,
             DeviceResult* r) {
  const FleetOptions& o = *p.options;
  vdev::SimulatedSensors sensors(mix64(o.conn.config.seed ^ mix64(index + 1)));
  std::unique_ptr<tb::Transport> stream;
  if (o.conn.tls()) {
    stream.reset(new tb::TlsTransport(clock, p.tls));
  } else {
    stream.reset(new tb::PlainTcp(clock));
  }
  // --mqtt-transport websocket: MQTT over WebSocket over that stream, each device's mask keys its own
  std::unique_ptr<tb::Transport> ws(
      o.conn.websocket() ? new tb::WsTransport(*stream, clock, mix64(o.conn.config.seed ^ mix64(0x57EB5ULL + index)))
                         : nullptr);
  tb::Transport* transport = ws ? ws.get() : stream.get();
  std::unique_ptr<tb::Publisher> publisher(new tb::Publisher(*transport, clock, sensors, log));
  publisher->set_stop_flag(p.stop->flag());
  const tb::PublishConfig cfg = make_config(p, id, index);
  tb::RunStats st;
  const tb::Err e = publisher->run(cfg, &st);
  r->tcp_connect_us = st.tcp_connect_us;
  r->handshake_us = o.conn.tls() ? st.handshake_us : -1;
  r->connack_us = st.connack_us;
  r->messages = st.messages_sent;
  r->connections = st.connections;
  r->resumed = st.resumed_connections;
  r->connected = st.connack_us >= 0 && e != tb::Err::ConnackRefused;
  if (e != tb::Err::Ok) {
    r->error = tb::err_name(e);
    r->message = publisher->error_text();
  }
}

}  // namespace

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

int64_t device_slot_us(const FleetPlan& p, uint32_t index) {
  return p.mono_base_us + static_cast<int64_t>(static_cast<double>(index) * 1e6 / p.options->connect_rate());
}

int64_t device_offset_us(const FleetOptions& o, uint32_t index) {
  if (o.conn.publish.interval_us == 0) return 0;
  return static_cast<int64_t>(mix64(mix64(o.conn.config.seed) + index) % o.conn.publish.interval_us);
}

Schedule device_schedule(const FleetOptions& o) {
  Schedule s;
  s.mode = o.conn.publish.mode;
  s.per_connection = o.conn.publish.per_connection;
  s.interval_us = o.conn.publish.interval_us;
  s.sleep_us = o.conn.publish.sleep_us;
  return s;
}

void run_device(const FleetPlan& p, uint32_t index, DeviceResult* r) {
  const FleetOptions& o = *p.options;
  FleetClock clock(*p.stop);
  const int64_t slot = device_slot_us(p, index);
  const int64_t offset = device_offset_us(o, index);
  clock.sleep_until_mono_us(slot + offset);
  const int64_t to_wall = clock.wall_us() - clock.mono_us();  // this device's mono -> wall mapping
  r->index = index;
  r->t_start_us = slot + to_wall;
  const std::string id = o.id(index);
  DeviceLog log(*p.logs, o.out_dir() + "/" + id + ".csv", slot + offset + to_wall, device_schedule(o), id,
                o.conn.config.connections_log);
  if (p.stop->requested()) {
    r->error = tb::err_name(tb::Err::Interrupted);
    r->message = "stopped by a signal before connecting";
  } else {
    publish(p, id, index, clock, log, r);
  }
  if (!log.flush() && r->error.empty()) {
    r->error = tb::err_name(tb::Err::SendLog);
    r->message = log.error();
  }
}

int wait_signal_until(int64_t until_us) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  while (true) {
    const int64_t left = until_us - mono_now_us();
    if (left <= 0) return 0;
    timespec ts;
    ts.tv_sec = static_cast<time_t>(left / 1000000);
    ts.tv_nsec = static_cast<long>((left % 1000000) * 1000);
    const int s = sigtimedwait(&set, nullptr, &ts);
    if (s > 0) return s;
  }
}

int run_devices(const FleetPlan& p, const std::vector<uint32_t>& indices, std::vector<DeviceResult>* out) {
  out->assign(indices.size(), DeviceResult());
  std::vector<std::thread> threads;
  threads.reserve(indices.size());
  std::atomic<size_t> done{0};
  int signo = 0;
  size_t launched = 0;
  for (; launched < indices.size(); ++launched) {
    signo = wait_signal_until(device_slot_us(p, indices[launched]));
    if (signo != 0) break;
    DeviceResult* slot = &(*out)[launched];
    const uint32_t index = indices[launched];
    threads.emplace_back([&p, &done, slot, index] {
      run_device(p, index, slot);
      done.fetch_add(1);
    });
  }
  if (signo != 0) p.stop->request();
  for (size_t k = launched; k < indices.size(); ++k) {
    (*out)[k].index = indices[k];
    (*out)[k].error = tb::err_name(tb::Err::Interrupted);
    (*out)[k].message = "stopped by a signal before it was started";
    const std::string id = p.options->id(indices[k]);
    // the header: every device has its log
    DeviceLog(*p.logs, p.options->out_dir() + "/" + id + ".csv", 0, Schedule()).flush();
  }
  while (done.load() < launched) {
    const int s = wait_signal_until(mono_now_us() + 50000);
    if (s != 0 && signo == 0) {
      signo = s;
      p.stop->request();
    }
  }
  for (std::thread& t : threads) t.join();
  return signo;
}

}  // namespace fleet
