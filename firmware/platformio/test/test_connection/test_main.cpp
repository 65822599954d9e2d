// Unit tests of the connection lifecycle (connection_mode.h): the Publisher over a scripted broker
// transport (connections, schedule, K, close modes, the resumption request and the claims counted),
// the resumed-claim rule, the board's side (RUN keys mode/per_connection/close, CONN lines), and the sleep
// between connections (the hook, an emulated deep sleep's kept session).
// Runs with PlatformIO's Unity (`pio test -e native`) and with host/unity/unity.h (ctest).
#include <unity.h>

#include "../tb_test_assert.h"

#include <cstring>
#include <string>
#include <vector>

#include "../board_rig.h"
#include "testbed_core.h"

using namespace tb;
using namespace tb_test;

void setUp(void) {}
void tearDown(void) {}

// ------------------------------------------------------------ rig for the Publisher
class LoopClock : public Clock {
 public:
  int64_t mono = 1000000;
  std::vector<int64_t> sleeps;
  volatile sig_atomic_t* stop_at_sleep_flag = nullptr;
  size_t stop_at_sleep = 0;  // the n-th sleep (1-based) raises the flag
  int64_t mono_us() override { return mono += 37; }
  int64_t wall_us() override { return mono + 1764470000000000LL; }
  void sleep_until_mono_us(int64_t t) override {
    sleeps.push_back(t);
    if (t > mono) mono = t;
    if (stop_at_sleep_flag != nullptr && sleeps.size() == stop_at_sleep) *stop_at_sleep_flag = 1;
  }
};

// A broker: CONNACK for CONNECT, PUBACK for a QoS 1 PUBLISH, the close after DISCONNECT. It fakes the
// TLS claim: with a resumption asked for, every connection after the first says resumed.
class ScriptedBroker : public Transport {
 public:
  explicit ScriptedBroker(LoopClock& clock) : clock_(clock) {}
  std::vector<std::string> conns;  // the bytes written, per connection
  std::vector<int64_t> open_at;    // mono time each open() began
  int closes = 0, aborts = 0;
  int64_t open_cost_us = 0;
  int fail_open_at = -1;  // this open (0-based) is refused
  bool never_closes = false;
  SessionResumption resumption = SessionResumption::None;
  Err open(const char*, uint16_t, uint32_t) override {
    open_at.push_back(clock_.mono);
    clock_.mono += open_cost_us;
    st = TransportStats();
    rx_.clear();
    disconnected_ = false;
    if (static_cast<int>(open_at.size()) - 1 == fail_open_at) return Err::ConnectRefused;
    conns.emplace_back();
    st.tcp_connect_us = 100;
    st.handshake_us = 2000;
    st.session_offered = resumption != SessionResumption::None && conns.size() > 1;
    st.resumed = st.session_offered ? 1 : 0;
    return Err::Ok;
  }
  Err write_all(const uint8_t* d, size_t n) override {
    conns.back().append(reinterpret_cast<const char*>(d), n);
    uint8_t out[8];
    size_t len = 0;
    mqtt::PublishView v;
    if (d[0] == 0x10) {
      mqtt::encode_connack(false, 0, out, sizeof(out), &len);
    } else if ((d[0] >> 4) == 3 && mqtt::decode_publish(d, n, &v) == Err::Ok && v.qos == 1) {
      mqtt::encode_puback(v.packet_id, out, sizeof(out), &len);
    } else if (d[0] == 0xE0) {
      disconnected_ = true;
    }
    rx_.append(reinterpret_cast<const char*>(out), len);
    return Err::Ok;
  }
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t) override {
    *got = 0;
    if (rx_.empty()) return disconnected_ && !never_closes ? Err::PeerClosed : Err::RecvTimeout;
    *got = rx_.size() < cap ? rx_.size() : cap;
    memcpy(buf, rx_.data(), *got);
    rx_.erase(0, *got);
    return Err::Ok;
  }
  void close() override { ++closes; }
  void abort() override { ++aborts; }
  void set_resumption(SessionResumption r) override { resumption = r; }
  const char* error_text() const override { return "scripted broker"; }
  const TransportStats& stats() const override { return st; }
  TransportStats st;

 private:
  LoopClock& clock_;
  std::string rx_;
  bool disconnected_ = false;
};

class FixedSensors : public SensorSource {
 public:
  Err read(uint32_t, SensorReading* out) override {
    *out = SensorReading();
    return Err::Ok;
  }
};

class Log : public SendObserver {
 public:
  std::vector<int64_t> sent_at;
  std::vector<ConnectionStats> conns;
  bool on_sent(uint32_t, int64_t t_send_us, size_t, size_t, int64_t) override {
    sent_at.push_back(t_send_us);
    return true;
  }
  void on_connection(const ConnectionStats& c) override { conns.push_back(c); }
};

struct Loop {
  LoopClock clock;
  ScriptedBroker broker{clock};
  FixedSensors sensors;
  Log log;
  Publisher publisher{broker, clock, sensors, log};
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  RunStats stats;
  Loop(ConnectionMode mode, uint32_t samples, uint32_t k) {
    cfg.host = "broker";
    cfg.samples = samples;
    cfg.interval_us = 100000;
    cfg.payload_size = 65;
    cfg.mode = mode;
    cfg.per_connection = k;
  }
  Err run() { return publisher.run(cfg, &stats); }
};

static int count_byte_at_packet_starts(const std::string& bytes, uint8_t first) {
  int n = 0;
  for (size_t pos = 0; pos < bytes.size();) {  // every packet here is < 128 bytes: 1-byte length
    n += static_cast<uint8_t>(bytes[pos]) == first;
    pos += 2 + static_cast<uint8_t>(bytes[pos + 1]);
  }
  return n;
}

// ------------------------------------------------------------ the loop
static void test_persistent_is_one_connection_as_before(void) {
  Loop l(ConnectionMode::Persistent, 5, 1);  // K is ignored
  ASSERT_OK(l.run());
  TEST_ASSERT_EQUAL_INT(1, l.broker.conns.size());
  TEST_ASSERT_EQUAL_INT(16 + 5 * 84 + 2, l.broker.conns[0].size());  // CONNECT, 5 x PUBLISH, DISCONNECT
  TEST_ASSERT_EQUAL_INT(1, l.broker.closes);
  TEST_ASSERT_EQUAL_INT(0, l.broker.aborts);
  TEST_ASSERT_TRUE(l.broker.resumption == SessionResumption::None);
  TEST_ASSERT_EQUAL_INT(1, l.log.conns.size());
  TEST_ASSERT_EQUAL_INT(5, l.log.conns[0].messages);
  TEST_ASSERT_EQUAL_INT(0, l.log.conns[0].resumed);
  ASSERT_OK(l.log.conns[0].error);
  TEST_ASSERT_EQUAL_INT(1, l.stats.connections);
  TEST_ASSERT_EQUAL_INT(2000, l.stats.handshake_us);
}

static void test_reconnect_opens_a_connection_per_message_on_the_schedule(void) {
  Loop l(ConnectionMode::Reconnect, 5, 1);
  ASSERT_OK(l.run());
  TEST_ASSERT_EQUAL_INT(5, l.broker.conns.size());
  for (const std::string& c : l.broker.conns) TEST_ASSERT_EQUAL_INT(16 + 84 + 2, c.size());
  TEST_ASSERT_EQUAL_INT(5, l.broker.closes);
  TEST_ASSERT_EQUAL_INT(5, l.stats.connections);
  TEST_ASSERT_EQUAL_INT(5, l.stats.messages_sent);
  TEST_ASSERT_EQUAL_INT(5, l.log.sent_at.size());
  for (uint32_t i = 0; i < 5; ++i) {
    TEST_ASSERT_EQUAL_INT(i, l.log.conns[i].index);
    TEST_ASSERT_EQUAL_INT(1, l.log.conns[i].messages);
    TEST_ASSERT_TRUE(l.log.conns[i].t_open_us > 0);
    // connection i opens at t0 + i * interval (t0 = just before the first), a few clock reads later
    const int64_t late = l.broker.open_at[i] - l.broker.open_at[0] - static_cast<int64_t>(i) * 100000;
    TEST_ASSERT_TRUE_MESSAGE(late >= 0 && late < 1000, std::to_string(late).c_str());
  }
}

static void test_per_connection_groups_messages(void) {
  Loop l(ConnectionMode::Reconnect, 7, 3);
  ASSERT_OK(l.run());
  TEST_ASSERT_EQUAL_INT(3, l.broker.conns.size());
  const int expected[] = {3, 3, 1};
  for (int i = 0; i < 3; ++i) {
    TEST_ASSERT_EQUAL_INT(expected[i], l.log.conns[i].messages);
    TEST_ASSERT_EQUAL_INT(expected[i], count_byte_at_packet_starts(l.broker.conns[i], 0x30));
    TEST_ASSERT_EQUAL_INT(1, count_byte_at_packet_starts(l.broker.conns[i], 0xE0));
  }
  // the messages after a connection's first keep the absolute schedule t0 + seq * interval (the first
  // ones are late by their connect, here a few clock reads)
  const int on_time[] = {1, 2, 4, 5};
  for (int i : on_time) {
    const int64_t gap = l.log.sent_at[i] - l.log.sent_at[1] - static_cast<int64_t>(i - 1) * 100000;
    TEST_ASSERT_TRUE_MESSAGE(gap >= 0 && gap < 200, std::to_string(gap).c_str());
  }
  for (int i : {0, 3, 6}) TEST_ASSERT_TRUE(l.log.sent_at[i] >= l.log.sent_at[1] + (i - 1) * 100000LL);
}

static void test_drop_sends_no_disconnect_and_waits_for_nothing(void) {
  Loop l(ConnectionMode::Reconnect, 3, 1);
  l.cfg.close = CloseMode::Drop;
  l.cfg.drain_timeout_ms = 5;
  l.broker.never_closes = true;  // a wait for the broker's close would fail the run (RecvTimeout)
  ASSERT_OK(l.run());
  TEST_ASSERT_EQUAL_INT(3, l.broker.aborts);
  TEST_ASSERT_EQUAL_INT(0, l.broker.closes);
  for (const std::string& c : l.broker.conns) {
    TEST_ASSERT_EQUAL_INT(16 + 84, c.size());
    TEST_ASSERT_EQUAL_INT(0, count_byte_at_packet_starts(c, 0xE0));
  }
  for (const ConnectionStats& c : l.log.conns) TEST_ASSERT_TRUE(c.close == CloseMode::Drop);
}

static void test_slow_connects_make_messages_late_never_skipped(void) {
  Loop l(ConnectionMode::Reconnect, 4, 1);
  l.broker.open_cost_us = 250000;  // 2.5 intervals
  ASSERT_OK(l.run());
  TEST_ASSERT_EQUAL_INT(4, l.log.sent_at.size());
  for (int i = 1; i < 4; ++i) {
    TEST_ASSERT_TRUE(l.log.sent_at[i] > l.log.sent_at[i - 1]);
    TEST_ASSERT_TRUE(l.broker.open_at[i] >= l.broker.open_at[i - 1] + 250000);  // right after the previous
  }
  TEST_ASSERT_TRUE(l.log.sent_at[3] - l.log.sent_at[0] >= 3 * 250000);
}

static void check_resumption(ConnectionMode mode, SessionResumption expected, uint32_t resumed) {
  Loop l(mode, 4, 1);
  ASSERT_OK(l.run());
  TEST_ASSERT_TRUE(l.broker.resumption == expected);
  TEST_ASSERT_EQUAL_INT(resumed, l.stats.resumed_connections);
  TEST_ASSERT_EQUAL_INT(0, l.log.conns[0].resumed);
  TEST_ASSERT_FALSE(l.log.conns[0].session_offered);
  for (int i = 1; i < 4; ++i) TEST_ASSERT_EQUAL_INT(resumed ? 1 : 0, l.log.conns[i].resumed);
}

static void test_resumption_asked_of_the_transport_and_claims_counted(void) {
  check_resumption(ConnectionMode::Reconnect, SessionResumption::None, 0);
  check_resumption(ConnectionMode::ResumeId, SessionResumption::SessionId, 3);
  check_resumption(ConnectionMode::ResumeTicket, SessionResumption::Ticket, 3);
}

static void test_failed_connection_ends_the_run_and_is_reported(void) {
  Loop l(ConnectionMode::Reconnect, 5, 1);
  l.broker.fail_open_at = 2;
  ASSERT_ERR(Err::ConnectRefused, l.run());
  TEST_ASSERT_EQUAL_INT(3, l.log.conns.size());
  TEST_ASSERT_EQUAL_INT(3, l.stats.connections);
  TEST_ASSERT_EQUAL_INT(2, l.stats.messages_sent);
  ASSERT_ERR(Err::ConnectRefused, l.log.conns[2].error);
  TEST_ASSERT_EQUAL_INT(0, l.log.conns[2].messages);
  TEST_ASSERT_EQUAL_INT(-1, l.log.conns[2].resumed);
  ASSERT_OK(l.log.conns[1].error);
  TEST_ASSERT_EQUAL_INT(3, l.broker.closes);  // after a failure: close() alone, as a persistent run does
}

static void test_stop_between_connections_names_the_count(void) {
  static volatile sig_atomic_t stop = 0;
  stop = 0;
  Loop l(ConnectionMode::Reconnect, 5, 1);
  l.clock.stop_at_sleep_flag = &stop;
  l.clock.stop_at_sleep = 2;  // during the wait before the third connection
  l.publisher.set_stop_flag(&stop);
  ASSERT_ERR(Err::Interrupted, l.run());
  TEST_ASSERT_EQUAL_INT(2, l.stats.connections);
  ASSERT_CONTAINS(l.publisher.error_text(), "after 2 of 5 messages");
}

static void test_zero_messages_per_connection_refused(void) {
  Loop l(ConnectionMode::ResumeId, 5, 0);
  ASSERT_ERR(Err::InvalidArgument, l.run());
  ASSERT_CONTAINS(l.publisher.error_text(), "at least 1");
  TEST_ASSERT_EQUAL_INT(0, l.broker.open_at.size());
}

static void test_resumed_claim_is_the_master_secret_kept(void) {
  unsigned char a[48], b[48];
  for (int i = 0; i < 48; ++i) a[i] = b[i] = static_cast<unsigned char>(i * 7);
  TEST_ASSERT_EQUAL_INT(1, tls_resumed_claim(true, a, b));
  TEST_ASSERT_EQUAL_INT(0, tls_resumed_claim(false, a, b));  // nothing offered: a full handshake
  b[47] ^= 1;
  TEST_ASSERT_EQUAL_INT(0, tls_resumed_claim(true, a, b));  // offered, but a new master: not resumed
  TEST_ASSERT_EQUAL_INT(0, tls_resumed_claim(true, a, nullptr));
}

static void test_mode_names_round_trip(void) {
  const ConnectionMode modes[] = {ConnectionMode::Persistent, ConnectionMode::Reconnect, ConnectionMode::ResumeId,
                                  ConnectionMode::ResumeTicket};
  for (ConnectionMode m : modes) {
    ConnectionMode back = ConnectionMode::Persistent;
    TEST_ASSERT_TRUE(parse_connection_mode(connection_mode_name(m), &back));
    TEST_ASSERT_TRUE(back == m);
  }
  ConnectionMode m;
  TEST_ASSERT_FALSE(parse_connection_mode("Reconnect", &m));
  TEST_ASSERT_FALSE(parse_connection_mode("resume_id", &m));
  CloseMode c;
  TEST_ASSERT_TRUE(parse_close_mode("drop", &c) && c == CloseMode::Drop);
  TEST_ASSERT_FALSE(parse_close_mode("rst", &c));
  TEST_ASSERT_EQUAL_STRING(proto::kModeResumeTicket, connection_mode_name(ConnectionMode::ResumeTicket));
  TEST_ASSERT_EQUAL_STRING(proto::kCloseDrop, close_mode_name(CloseMode::Drop));
}

// ------------------------------------------------------------ the board: RUN keys and CONN lines
static const char kBody[] =
    "id=c1\nhost=127.0.0.1\nport=1\ntransport=plain\npayload=65\nsamples=3\ninterval_us=1000\nqos=0\n";

static Err parse(const std::string& text, DeviceConfig* r, ErrorText* err) {
  std::vector<char> buf(text.begin(), text.end());
  buf.push_back('\0');
  return proto::parse_run_body(buf.data(), text.size(), r, err);  // r's texts die with buf
}

static void test_run_keys_of_the_connection_lifecycle(void) {
  DeviceConfig r(TB_BOARD);
  ErrorText err;
  ASSERT_OK(parse(kBody, &r, &err));
  PublishConfig cfg(r);
  TEST_ASSERT_TRUE(cfg.mode == ConnectionMode::Persistent && cfg.close == CloseMode::Disconnect);
  TEST_ASSERT_EQUAL_INT(1, cfg.per_connection);
  const std::string lifecycle = std::string(kBody) + "mode=resume-ticket\nper_connection=5\nclose=drop\n";
  ASSERT_OK(parse(lifecycle, &r, &err));
  cfg = PublishConfig(r);
  TEST_ASSERT_TRUE(cfg.mode == ConnectionMode::ResumeTicket && cfg.close == CloseMode::Drop);
  TEST_ASSERT_EQUAL_INT(5, cfg.per_connection);
  ASSERT_ERR(Err::UnsupportedMode, parse(std::string(kBody) + "mode=sometimes\n", &r, &err));
  ASSERT_CONTAINS(err.c_str(), "known: persistent, reconnect, resume-id, resume-ticket");
  ASSERT_ERR(Err::InvalidArgument, parse(std::string(kBody) + "per_connection=0\n", &r, &err));
  ASSERT_CONTAINS(err.c_str(), "\"per_connection\": \"0\" is not an integer 1..1000000");
  ASSERT_ERR(Err::InvalidArgument, parse(std::string(kBody) + "close=rst\n", &r, &err));
  ASSERT_CONTAINS(err.c_str(), "\"close\": \"rst\" is not disconnect or drop");
}

static std::vector<std::string> board_run(const std::string& extra, FakeBroker* broker) {
  ScriptStream io;
  StepClock clock;
  NoSensors sensors;
  FixedPort port;
  BoardInfo info;
  add_run(&io.in, std::string(kBody) + extra);
  BoardSession s(io, clock, sensors, port, info, nullptr);
  s.set_transport_filter(broker);
  s.boot();
  while (s.poll(10) == Err::Ok) {
  }
  std::vector<std::string> out;
  for (const std::string& l : io.lines()) {
    if (l.rfind("ACK ", 0) != 0 && l != "READY" && l.rfind("BANNER ", 0) != 0) out.push_back(l.substr(0, l.find(' ')));
    if (l.rfind("CONN ", 0) == 0) out.back() = l;
    if (l.rfind("ERROR ", 0) == 0) TEST_FAIL_MESSAGE(l.c_str());
  }
  return out;
}

static void test_board_prints_a_conn_line_per_connection(void) {
  FakeBroker broker;
  std::vector<std::string> l = board_run("mode=resume-id\nper_connection=2\n", &broker);
  TEST_ASSERT_EQUAL_INT(7, l.size());
  TEST_ASSERT_EQUAL_STRING("HANDSHAKE", l[0].c_str());
  TEST_ASSERT_EQUAL_STRING("MSG", l[1].c_str());
  TEST_ASSERT_EQUAL_STRING("MSG", l[2].c_str());
  ASSERT_CONTAINS(l[3].c_str(), "CONN i=0 tcp_ms=- tls_ms=- connack_ms=0.");
  ASSERT_CONTAINS(l[3].c_str(), " resumed=- msgs=2 close=disconnect");
  TEST_ASSERT_EQUAL_STRING("MSG", l[4].c_str());
  ASSERT_CONTAINS(l[5].c_str(), "CONN i=1 ");
  ASSERT_CONTAINS(l[5].c_str(), " msgs=1 close=disconnect");
  TEST_ASSERT_EQUAL_STRING("DONE", l[6].c_str());
  TEST_ASSERT_EQUAL_INT(2, broker.opens);
  TEST_ASSERT_TRUE(broker.resumption == SessionResumption::SessionId);
}

static void test_board_persistent_prints_no_conn_and_drop_aborts(void) {
  FakeBroker persistent;
  std::vector<std::string> l = board_run("mode=persistent\nper_connection=2\n", &persistent);
  TEST_ASSERT_EQUAL_INT(5, l.size());  // HANDSHAKE, 3 x MSG, DONE
  for (const std::string& s : l) TEST_ASSERT_TRUE_MESSAGE(s.rfind("CONN", 0) != 0, s.c_str());
  TEST_ASSERT_EQUAL_INT(1, persistent.opens);
  FakeBroker dropped;
  l = board_run("mode=reconnect\nclose=drop\n", &dropped);
  TEST_ASSERT_EQUAL_INT(3, dropped.opens);
  TEST_ASSERT_EQUAL_INT(3, dropped.aborts);
  TEST_ASSERT_EQUAL_INT(0, dropped.closes);
  ASSERT_CONTAINS(l[l.size() - 2].c_str(), "CONN i=2 ");
  ASSERT_CONTAINS(l[l.size() - 2].c_str(), " msgs=1 close=drop");
}

// ------------------------------------------------------------ one CONNECT (issue 21 part 3)
// The check pass (validate) and every connection of the run build their CONNECT from one place
// (connect_options): the bytes validate encoded are the first bytes of each connection, for options that
// differ from ConnectOptions' defaults too, and they decode to what the configuration asked for.
static void test_check_pass_connect_is_every_connections_connect(void) {
  struct Case {
    const char* client_id;
    const char* username;
    const char* password;
    uint16_t keepalive_s;
    ConnectionMode mode;
  };
  const Case cases[] = {
      {"v1", nullptr, nullptr, 60, ConnectionMode::Persistent},
      {"sensor-7", "publisher", "pw-1", 5, ConnectionMode::Reconnect},
      {"", "reader", nullptr, 0, ConnectionMode::ResumeTicket},  // empty id: allowed with a clean session
  };
  for (const Case& c : cases) {
    Loop l(c.mode, 4, 2);
    l.cfg.client_id = c.client_id;
    l.cfg.username = c.username;
    l.cfg.password = c.password;
    l.cfg.keepalive_s = c.keepalive_s;
    ASSERT_OK(l.publisher.validate(l.cfg));
    const uint8_t* bytes = nullptr;
    const size_t n = l.publisher.checked_connect(&bytes);
    TEST_ASSERT_TRUE(n > 0 && bytes[0] == 0x10);
    const std::string checked(reinterpret_cast<const char*>(bytes), n);
    ASSERT_OK(l.run());
    TEST_ASSERT_EQUAL_INT(c.mode == ConnectionMode::Persistent ? 1 : 2, l.broker.conns.size());
    for (const std::string& conn : l.broker.conns) {
      TEST_ASSERT_TRUE(conn.size() > n);
      TEST_ASSERT_EQUAL_MEMORY(checked.data(), conn.data(), n);
      TEST_ASSERT_EQUAL_INT(0x30, static_cast<uint8_t>(conn[n]));  // the CONNECT ends where the PUBLISH begins
    }
    mqtt::ConnectView v;
    ASSERT_OK(mqtt::decode_connect(reinterpret_cast<const uint8_t*>(checked.data()), n, &v));
    TEST_ASSERT_EQUAL_STRING(c.client_id, std::string(v.client_id, v.client_id_len).c_str());
    TEST_ASSERT_EQUAL_INT(c.username != nullptr, v.has_username);
    TEST_ASSERT_EQUAL_INT(c.password != nullptr, v.has_password);
    TEST_ASSERT_EQUAL_INT(c.keepalive_s, v.keepalive_s);
    TEST_ASSERT_TRUE(v.clean_session);
  }
}

// ------------------------------------------------------------ the sleep between connections (sleep_mode.h)
class SleepLog : public BetweenConnections {
 public:
  explicit SleepLog(const ScriptedBroker& b) : broker_(b) {}
  std::vector<int64_t> due;
  std::vector<int> closed_before;  // the connections the broker saw closed when the sleep began
  SleepMode mode = SleepMode::Stay;
  Err sleep(SleepMode m, int64_t due_mono_us) override {
    mode = m;
    due.push_back(due_mono_us);
    closed_before.push_back(broker_.closes);
    return Err::Ok;
  }

 private:
  const ScriptedBroker& broker_;
};

static void test_the_sleep_comes_between_connections_only(void) {
  Loop l(ConnectionMode::ResumeTicket, 6, 2);
  l.cfg.sleep_mode = SleepMode::Deep;
  SleepLog sleeps(l.broker);
  l.publisher.set_between(&sleeps);
  ASSERT_OK(l.run());
  TEST_ASSERT_EQUAL_INT(3, l.broker.conns.size());
  TEST_ASSERT_EQUAL_INT(2, sleeps.due.size());  // none before the first connection (the boot)
  TEST_ASSERT_TRUE(sleeps.mode == SleepMode::Deep);
  TEST_ASSERT_EQUAL_INT(1, sleeps.closed_before[0]);  // after the connection before it ended
  TEST_ASSERT_EQUAL_INT(2, sleeps.closed_before[1]);
  TEST_ASSERT_EQUAL_INT(sleeps.due[0] + 2 * 100000, sleeps.due[1]);  // due: the next connection's first message
  TEST_ASSERT_TRUE(l.broker.open_at[1] >= sleeps.due[0]);
  Loop p(ConnectionMode::Persistent, 3, 1);
  SleepLog none(p.broker);
  p.publisher.set_between(&none);
  ASSERT_OK(p.run());
  TEST_ASSERT_EQUAL_INT(0, none.due.size());
}

// A transport whose session is a few bytes: what emulate_sleep does to it, in order.
class KeepingBroker : public ScriptedBroker {
 public:
  explicit KeepingBroker(LoopClock& c) : ScriptedBroker(c) {}
  std::string session = "ticket-and-master-secret", events;
  Err keep_session(KeptSession* out) override {
    events += "keep,";
    out->store(reinterpret_cast<const uint8_t*>(session.data()), session.size());
    return Err::Ok;
  }
  Err restore_session(const KeptSession& in) override {
    events += "restore,";
    session = in.valid() ? std::string(reinterpret_cast<const char*>(in.bytes), in.length) : std::string();
    return Err::Ok;
  }
  void power_off() override {
    events += "power_off,";
    session.clear();
  }
};

static void test_an_emulated_deep_sleep_keeps_the_session_alone(void) {
  LoopClock clock;
  KeepingBroker t(clock);
  KeptSession rtc;
  rtc.clear();
  int kept = -1;
  ASSERT_OK(emulate_sleep(t, SleepMode::Light, &rtc, &kept));
  TEST_ASSERT_EQUAL_STRING("", t.events.c_str());  // a host's light sleep: nothing to emulate
  TEST_ASSERT_EQUAL_INT(0, kept);
  ASSERT_OK(emulate_sleep(t, SleepMode::Deep, &rtc, &kept));
  TEST_ASSERT_EQUAL_STRING("keep,power_off,restore,", t.events.c_str());
  TEST_ASSERT_EQUAL_STRING("ticket-and-master-secret", t.session.c_str());  // back from the kept bytes alone
  TEST_ASSERT_EQUAL_INT(1, kept);
}

static void test_a_kept_session_knows_itself(void) {
  KeptSession k;
  k.clear();
  TEST_ASSERT_FALSE(k.valid());
  const uint8_t bytes[] = {1, 2, 3, 4, 5};
  TEST_ASSERT_TRUE(k.store(bytes, sizeof(bytes)));
  TEST_ASSERT_TRUE(k.valid());
  KeptSession copy;
  memcpy(&copy, &k, sizeof(k));  // RTC memory holds bytes: a copy is the same session
  TEST_ASSERT_TRUE(copy.valid());
  copy.bytes[2] ^= 0x40;  // what a power-on leaves there is not one
  TEST_ASSERT_FALSE(copy.valid());
  static uint8_t big[KeptSession::kCapacity + 1];
  TEST_ASSERT_FALSE(k.store(big, sizeof(big)));
  TEST_ASSERT_FALSE(k.valid());
  SleepMode s;
  PowerSave p;
  TEST_ASSERT_TRUE(parse_sleep_mode("deep", &s) && s == SleepMode::Deep);
  TEST_ASSERT_TRUE(parse_sleep_mode("light", &s) && s == SleepMode::Light);
  TEST_ASSERT_FALSE(parse_sleep_mode("Deep", &s));
  TEST_ASSERT_EQUAL_STRING("stay", sleep_mode_name(SleepMode::Stay));
  TEST_ASSERT_TRUE(parse_power_save("modem-sleep", &p) && p == PowerSave::ModemSleep);
  TEST_ASSERT_EQUAL_STRING("none", power_save_name(PowerSave::None));
  DeviceConfig c;
  PublishConfig cfg(c);  // the .def's defaults: the board as before
  TEST_ASSERT_TRUE(cfg.sleep_mode == SleepMode::Stay && cfg.power_save == PowerSave::None);
}

// The power trace's marker: just before each connection is opened and each PUBLISH is handed over.
class MarkLog : public RunMarker {
 public:
  explicit MarkLog(const ScriptedBroker& b) : broker_(b) {}
  std::vector<std::string> at;  // what the broker had seen at each mark: opens, bytes of the current connection
  void mark() override {
    at.push_back(std::to_string(broker_.open_at.size()) + ":" +
                 std::to_string(broker_.conns.empty() ? 0 : broker_.conns.back().size()));
  }

 private:
  const ScriptedBroker& broker_;
};

static void test_the_marker_comes_before_each_connection_and_publish(void) {
  Loop l(ConnectionMode::Reconnect, 4, 2);
  MarkLog marks(l.broker);
  l.publisher.set_marker(&marks);
  ASSERT_OK(l.run());
  // connection 0: marked before its open (0 opens), then before each PUBLISH (after CONNECT's 16 B, then + 84 B)
  const std::vector<std::string> want = {"0:0", "1:16", "1:100", "1:186", "2:16", "2:100"};
  TEST_ASSERT_EQUAL_INT(want.size(), marks.at.size());
  for (size_t i = 0; i < want.size(); ++i) TEST_ASSERT_EQUAL_STRING(want[i].c_str(), marks.at[i].c_str());
}

int main(int, char**) {
  UNITY_BEGIN();
  RUN_TEST(test_persistent_is_one_connection_as_before);
  RUN_TEST(test_reconnect_opens_a_connection_per_message_on_the_schedule);
  RUN_TEST(test_per_connection_groups_messages);
  RUN_TEST(test_drop_sends_no_disconnect_and_waits_for_nothing);
  RUN_TEST(test_slow_connects_make_messages_late_never_skipped);
  RUN_TEST(test_resumption_asked_of_the_transport_and_claims_counted);
  RUN_TEST(test_failed_connection_ends_the_run_and_is_reported);
  RUN_TEST(test_stop_between_connections_names_the_count);
  RUN_TEST(test_zero_messages_per_connection_refused);
  RUN_TEST(test_resumed_claim_is_the_master_secret_kept);
  RUN_TEST(test_mode_names_round_trip);
  RUN_TEST(test_run_keys_of_the_connection_lifecycle);
  RUN_TEST(test_board_prints_a_conn_line_per_connection);
  RUN_TEST(test_board_persistent_prints_no_conn_and_drop_aborts);
  RUN_TEST(test_check_pass_connect_is_every_connections_connect);
  RUN_TEST(test_the_sleep_comes_between_connections_only);
  RUN_TEST(test_an_emulated_deep_sleep_keeps_the_session_alone);
  RUN_TEST(test_a_kept_session_knows_itself);
  RUN_TEST(test_the_marker_comes_before_each_connection_and_publish);
  return UNITY_END();
}
