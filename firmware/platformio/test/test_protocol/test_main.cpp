// Unit tests of the serial control protocol (board_protocol.h) and of BoardSession over a scripted
// byte stream. Runs with PlatformIO's Unity (`pio test -e native`) and with host/unity/unity.h (ctest).
#include <unity.h>

#include "../tb_test_assert.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "board_protocol.h"
#include "board_session.h"
#include "device_options.h"
#include "payload.h"
#include "time_sync.h"
#include "../board_rig.h"

using namespace tb;
using namespace tb_test;

void setUp(void) {}
void tearDown(void) {}

static const char kPlainBody[] =
    "id=cell-1\nhost=127.0.0.1\nport=1\ntransport=plain\npayload=65\nsamples=3\ninterval_us=1000\nqos=0\n"
    "connect_timeout_ms=1\n";

// ------------------------------------------------------------ primitives
static void test_crc32_is_zlibs(void) {
  TEST_ASSERT_EQUAL_UINT32(0xCBF43926u, crc_of("123456789"));
  TEST_ASSERT_EQUAL_UINT32(0u, crc_of(""));
  const std::string a = "hello ", b = "world";
  uint32_t part = proto::crc32(reinterpret_cast<const uint8_t*>(a.data()), a.size());
  TEST_ASSERT_EQUAL_UINT32(crc_of(a + b), proto::crc32(reinterpret_cast<const uint8_t*>(b.data()), b.size(), part));
}

static void test_base64_decode_strict(void) {
  uint8_t out[16];
  size_t n = 0;
  ASSERT_OK(proto::base64_decode("TWFu", 4, out, sizeof(out), &n));
  TEST_ASSERT_EQUAL_INT(3, n);
  TEST_ASSERT_EQUAL_MEMORY("Man", out, 3);
  ASSERT_OK(proto::base64_decode("TWE=", 4, out, sizeof(out), &n));
  TEST_ASSERT_EQUAL_INT(2, n);
  ASSERT_OK(proto::base64_decode("TQ==", 4, out, sizeof(out), &n));
  TEST_ASSERT_EQUAL_INT(1, n);
  TEST_ASSERT_EQUAL_INT('M', out[0]);
  ASSERT_ERR(Err::BadEncoding, proto::base64_decode("TWF", 3, out, sizeof(out), &n));
  ASSERT_ERR(Err::BadEncoding, proto::base64_decode("TW=u", 4, out, sizeof(out), &n));
  ASSERT_ERR(Err::BadEncoding, proto::base64_decode("TW-u", 4, out, sizeof(out), &n));
  ASSERT_ERR(Err::BadEncoding, proto::base64_decode("", 0, out, sizeof(out), &n));
  ASSERT_ERR(Err::BufferTooSmall, proto::base64_decode("TWFuTWFu", 8, out, 5, &n));
}

static void test_chunk_size_fits_the_receive_buffer(void) {
  TEST_ASSERT_EQUAL_INT(174, proto::chunk_bytes_for(256));
  TEST_ASSERT_EQUAL_INT(proto::kMaxChunkBytes, proto::chunk_bytes_for(4096));
  TEST_ASSERT_EQUAL_INT(0, proto::chunk_bytes_for(16));
  for (size_t rx = 40; rx <= 1024; ++rx) {
    size_t raw = proto::chunk_bytes_for(rx);
    size_t line = strlen("RUN CHUNK i=65535 ") + (raw + 2) / 3 * 4 + 1;
    TEST_ASSERT_TRUE_MESSAGE(line <= rx && line <= proto::kMaxHostLine, "a chunk line overflows the buffer");
  }
}

// ------------------------------------------------------------ RUN body
static void test_body_parses_every_key_and_unescapes(void) {
  char body[] =
      "id=c1\nhost=192.0.2.10\nport=8883\ntransport=tls\nciphers=TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256\n"
      "ca=-----BEGIN CERTIFICATE-----\\nMIIB\\r\\nback\\\\slash\\n\nserver_name=broker\nusername=u\npassword=p w\n"
      "payload=100\nsamples=200\ninterval_us=500\nqos=1\ndevice_id=e7\ntopic=t/x\nclient_id=cid\nkeylog=1\n"
      "connect_timeout_ms=2000\nsync_host=192.0.2.1\nsync_port=9123\nsync_count=16\nmode=persistent\n";
  DeviceConfig r(TB_BOARD);
  ErrorText err;
  ASSERT_OK(proto::parse_run_body(body, strlen(body), &r, &err));
  const PublishConfig cfg(r);
  TEST_ASSERT_EQUAL_STRING("c1", r.id);
  TEST_ASSERT_EQUAL_STRING("192.0.2.10", cfg.host);
  TEST_ASSERT_EQUAL_INT(8883, cfg.port);
  TEST_ASSERT_EQUAL_STRING("tls", r.transport);
  TEST_ASSERT_EQUAL_STRING("-----BEGIN CERTIFICATE-----\nMIIB\r\nback\\slash\n", r.given_text(opt::Id::ca));
  TEST_ASSERT_EQUAL_STRING("p w", cfg.password);
  TEST_ASSERT_EQUAL_INT(100, cfg.payload_size);
  TEST_ASSERT_EQUAL_INT(500, cfg.interval_us);  // the board's key is microseconds
  TEST_ASSERT_EQUAL_INT(1, cfg.qos);
  TEST_ASSERT_TRUE(proto::run_keylog(r));
  TEST_ASSERT_EQUAL_STRING("192.0.2.1", r.sync_host);
  TEST_ASSERT_EQUAL_INT(16, r.sync_count);
  TEST_ASSERT_TRUE(cfg.mode == ConnectionMode::Persistent);
  TEST_ASSERT_NULL(r.given_text(opt::Id::cert));
  TEST_ASSERT_EQUAL_INT(mqtt::kLevel311, cfg.mqtt_level);  // version 3's keys left out: their defaults
  TEST_ASSERT_TRUE(cfg.clean_session);
  TEST_ASSERT_EQUAL_INT(1, cfg.inflight);
  TEST_ASSERT_EQUAL_INT(3600, cfg.session_expiry_s);  // the .def's default, as vdevice's
}

// Version 3: the MQTT version, session and in-flight keys reach the request.
static void test_body_parses_the_mqtt_keys(void) {
  std::string text = std::string(kPlainBody) +
                     "mqtt=5\nsession=persistent\nsession_expiry_s=120\ntopic_alias=on\ninflight=8\n"
                     "ack_timeout_ms=1500\n";
  std::vector<char> buf(text.begin(), text.end());
  buf.push_back('\0');
  DeviceConfig r(TB_BOARD);
  ErrorText err;
  ASSERT_OK(proto::parse_run_body(buf.data(), text.size(), &r, &err));
  const PublishConfig cfg(r);
  TEST_ASSERT_EQUAL_INT(mqtt::kLevel5, cfg.mqtt_level);
  TEST_ASSERT_FALSE(cfg.clean_session);
  TEST_ASSERT_EQUAL_INT(120, cfg.session_expiry_s);
  TEST_ASSERT_TRUE(cfg.topic_alias);
  TEST_ASSERT_EQUAL_INT(8, cfg.inflight);
  TEST_ASSERT_EQUAL_INT(1500, cfg.ack_timeout_ms);
}

static Err parse_text(const std::string& text, ErrorText* err) {
  std::vector<char> buf(text.begin(), text.end());
  buf.push_back('\0');
  DeviceConfig r(TB_BOARD);
  return proto::parse_run_body(buf.data(), text.size(), &r, err);
}

static void check_body_error(const std::string& text, Err expected, const char* words) {
  ErrorText err;
  Err got = parse_text(text, &err);
  TEST_ASSERT_EQUAL_INT_MESSAGE(static_cast<int>(expected), static_cast<int>(got), (std::string(err_name(got)) + " for: " + text).c_str());
  ASSERT_CONTAINS(err.c_str(), words);
}

static void test_body_refuses_with_named_causes(void) {
  const std::string ok = kPlainBody;
  check_body_error(ok + "colour=blue\n", Err::UnknownKey, "\"colour\" is unknown to protocol version 4");
  check_body_error(ok + "topic_alias=on\n", Err::InvalidArgument, "\"topic_alias\": on needs mqtt=5");
  check_body_error(ok + "inflight=0\n", Err::InvalidArgument, "\"inflight\"");
  check_body_error(ok + "port=2\n", Err::DuplicateKey, "\"port\" given twice");
  check_body_error("id=a\nhost=h\nport=1\ntransport=plain\nsamples=1\ninterval_us=0\nqos=0\n", Err::MissingKey,
                   "\"payload\" missing");
  check_body_error(ok + "topic=a\\tb\n", Err::BadEncoding, "bad escape");
  check_body_error(ok + "\n", Err::BadEncoding, "not key=value");
  check_body_error(ok + "=x\n", Err::BadEncoding, "not key=value");
  check_body_error(ok + "mode=per-message\n", Err::UnsupportedMode, "per-message");
  check_body_error(ok + "sync_port=9\n", Err::MissingKey, "sync_host");
  check_body_error(ok + "sync_host=h\n", Err::MissingKey, "sync_port");
  check_body_error(ok + "ca=x\n", Err::InvalidArgument, "only goes with transport=tls");
  std::string tls = ok;
  tls.replace(tls.find("transport=plain"), 15, "transport=tls");
  check_body_error(tls, Err::MissingKey, "\"ca\" missing (transport=tls)");
  check_body_error(tls + "ca=x\n", Err::MissingKey, "\"ciphers\" missing");
  check_body_error(tls + "ca=x\nciphers=y\ncert=z\n", Err::MissingKey, "\"key\" missing");
  std::string qos = ok;
  qos.replace(qos.find("qos=0"), 5, "qos=3");
  check_body_error(qos, Err::InvalidArgument, "\"qos\": \"3\" is not an integer 0..2");
  std::string id = ok;
  id.replace(id.find("id=cell-1"), 9, "id=a b");
  check_body_error(id, Err::InvalidArgument, "\"id\"");
  std::string port = ok;
  port.replace(port.find("port=1\n"), 7, "port=65536\n");
  check_body_error(port, Err::InvalidArgument, "\"port\"");
}

// ------------------------------------------------------------ framing
static Err feed(proto::RunReceiver& rx, const std::string& line, proto::RunReceiver::Step* step, ErrorText* err) {
  return rx.feed(line.c_str() + 4, step, err);  // without "RUN "
}

static void test_receiver_assembles_chunks(void) {
  proto::RunReceiver rx;
  ErrorText err;
  proto::RunReceiver::Step step;
  std::vector<std::string> lines = run_lines(kPlainBody, 7);
  ASSERT_OK(feed(rx, lines[0], &step, &err));
  TEST_ASSERT_TRUE(step == proto::RunReceiver::Step::AckBegin);
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    ASSERT_OK(feed(rx, lines[i], &step, &err));
    TEST_ASSERT_TRUE(step == proto::RunReceiver::Step::AckChunk);
    TEST_ASSERT_EQUAL_INT(i - 1, rx.chunk_index());
  }
  ASSERT_OK(feed(rx, lines.back(), &step, &err));
  TEST_ASSERT_TRUE(step == proto::RunReceiver::Step::Complete);
  TEST_ASSERT_TRUE(strcmp(kPlainBody, rx.body()) == 0);
  TEST_ASSERT_FALSE(rx.active());
}

static void check_framing_error(const std::vector<std::string>& lines, Err expected, const char* words) {
  proto::RunReceiver rx;
  ErrorText err;
  proto::RunReceiver::Step step;
  Err last = Err::Ok;
  for (const std::string& l : lines) {
    last = feed(rx, l, &step, &err);
    if (last != Err::Ok) break;
  }
  ASSERT_ERR(expected, last);
  ASSERT_CONTAINS(err.c_str(), words);
  TEST_ASSERT_FALSE(rx.active());
}

static void test_receiver_refuses_with_named_causes(void) {
  std::vector<std::string> good = run_lines(kPlainBody, 16);
  std::vector<std::string> bad_crc = good;
  bad_crc[0] = bad_crc[0].substr(0, bad_crc[0].size() - 8) + "00000000";
  check_framing_error(bad_crc, Err::CrcMismatch, "announced 00000000");
  std::vector<std::string> dup = good;
  dup.insert(dup.begin() + 2, dup[1]);
  check_framing_error(dup, Err::ChunkDuplicate, "chunk 0 came twice");
  std::vector<std::string> gap = good;
  gap.erase(gap.begin() + 2);
  check_framing_error(gap, Err::ChunkMissing, "chunk 1 is missing");
  std::vector<std::string> short_end = good;
  short_end.erase(short_end.end() - 2);
  check_framing_error(short_end, Err::LengthMismatch, "RUN END after");
  check_framing_error({"RUN BEGIN len=99999 crc=00000000"}, Err::BodyTooLarge, "larger than this board's 8192");
  check_framing_error({"RUN BEGIN len=3 crc=00000000", "RUN CHUNK i=0 " + b64("abcdef")}, Err::BodyTooLarge,
                      "runs past");
  check_framing_error({"RUN CHUNK i=0 TWFu"}, Err::OutOfSequence, "without RUN BEGIN");
  check_framing_error({"RUN END"}, Err::OutOfSequence, "without RUN BEGIN");
  check_framing_error({"RUN BEGIN len=3"}, Err::BadEncoding, "len=<bytes> crc=<8 hex digits>");
  check_framing_error({"RUN BEGIN len=4 crc=00000000", "RUN CHUNK i=0 TW!u"}, Err::BadEncoding, "not base64");
  check_framing_error({"RUN START"}, Err::UnknownCommand, "START");
}

// ------------------------------------------------------------ session over a scripted stream

// A time-echo service that answers every request at once: t2 = t1 + 5000, t3 = t2 + 20.
class EchoDatagram : public Datagram {
 public:
  uint8_t pending[timesync_wire::kSize];
  bool has = false;
  int opened = 0;
  Err open(const char*, uint16_t) override {
    ++opened;
    return Err::Ok;
  }
  Err send(const uint8_t* data, size_t len) override {
    if (len != timesync_wire::kSize) return Err::Send;
    memcpy(pending, data, len);
    has = true;
    return Err::Ok;
  }
  Err recv(uint8_t* buf, size_t cap, size_t* len, uint32_t) override {
    if (!has || cap < timesync_wire::kSize) return Err::RecvTimeout;
    has = false;
    timesync_wire::Reply r;
    r.flags = 0;
    r.seq = (uint32_t(pending[8]) << 24) | (uint32_t(pending[9]) << 16) | (uint32_t(pending[10]) << 8) | pending[11];
    int64_t t1 = 0;
    for (int i = 0; i < 8; ++i) t1 = (t1 << 8) | pending[16 + i];
    r.t1_us = t1;
    r.t2_us = t1 + 5000;
    r.t3_us = r.t2_us + 20;
    timesync_wire::encode_reply(r, buf);
    *len = timesync_wire::kSize;
    return Err::Ok;
  }
  void close() override {}
};

struct Rig {
  ScriptStream io;
  StepClock clock;
  NoSensors sensors;
  FixedPort port;
  EchoDatagram echo;
  BoardInfo info;
  std::vector<std::string> run(bool with_datagram = true) {
    info.board = "test";
    info.chip = "fake chip";  // a space becomes '_'
    info.mbedtls = "2.28.x";
    info.device_id = "e1";  // the board's own identity (as board-emu's)
    BoardSession s(io, clock, sensors, port, info, with_datagram ? &echo : nullptr);
    s.boot();
    while (s.poll(10) == Err::Ok) {
    }
    return io.lines();
  }
};


static void test_session_banner_ready_hello_unknown(void) {
  Rig rig;
  rig.io.in = "HELLO\r\n\nFLASH now\n";
  std::vector<std::string> l = rig.run();
  TEST_ASSERT_EQUAL_INT(6, l.size());
  TEST_ASSERT_EQUAL_STRING(
      "BANNER proto=4 board=test chip=fake_chip mac=- fw=- arduino=- idf=- mbedtls=2.28.x cpu_mhz=0 wifi_ps=- "
      "hw_crypto=- sw_crypto=- rx_buf=256 device=e1",
      l[0].c_str());
  TEST_ASSERT_EQUAL_STRING("READY", l[1].c_str());
  TEST_ASSERT_EQUAL_STRING(l[0].c_str(), l[2].c_str());
  TEST_ASSERT_EQUAL_STRING("READY", l[3].c_str());
  TEST_ASSERT_EQUAL_STRING("ERROR UnknownCommand: unknown command \"FLASH\" (HELLO, RUN, STOP)", l[4].c_str());
  TEST_ASSERT_EQUAL_STRING("READY", l[5].c_str());
}

static void test_session_acks_every_chunk_then_runs(void) {
  Rig rig;
  add_run(&rig.io.in, kPlainBody, 20);
  std::vector<std::string> l = rig.run();
  size_t chunks = (strlen(kPlainBody) + 19) / 20;
  TEST_ASSERT_EQUAL_STRING("ACK begin", l[2].c_str());
  for (size_t i = 0; i < chunks; ++i) TEST_ASSERT_EQUAL_STRING(("ACK chunk i=" + std::to_string(i)).c_str(), l[3 + i].c_str());
  size_t k = 3 + chunks;
  TEST_ASSERT_EQUAL_STRING("ACK run id=cell-1", l[k].c_str());
  TEST_ASSERT_EQUAL_STRING("HANDSHAKE tcp_ms=- tls_ms=- connack_ms=- version=- suite=- min_heap=900 heap_before=1000",
                           l[k + 1].c_str());
  TEST_ASSERT_EQUAL_STRING("ERROR ConnectRefused: TCP connect to 127.0.0.1:1 failed: Connection refused",
                           l[k + 2].c_str());
  TEST_ASSERT_EQUAL_STRING("READY", l[k + 3].c_str());
  TEST_ASSERT_EQUAL_INT(k + 4, l.size());
}

static void test_session_errors_then_ready_and_serves_the_next_run(void) {
  Rig rig;
  std::string bad = kPlainBody;
  bad.replace(bad.find("payload=65"), 10, "payload=40");
  add_run(&rig.io.in, bad);                        // validation: PayloadTooSmall, before any ACK run
  rig.io.in += "RUN BEGIN len=5 crc=00000000\nRUN CHUNK i=0 aGVsbG8=\nRUN END\n";  // CrcMismatch
  rig.io.in += "RUN CHUNK i=0 aGVsbG8=\n";          // OutOfSequence
  rig.io.in += "RUN " + std::string(400, 'x') + "\n";  // LineTooLong
  rig.io.in += "RUN BEGIN len=5 crc=00000000\nRUN ABORT\n";
  add_run(&rig.io.in, kPlainBody);
  std::vector<std::string> l = rig.run();
  std::vector<std::string> errors, readies;
  for (const std::string& s : l) {
    if (s.rfind("ERROR ", 0) == 0) errors.push_back(s);
  }
  TEST_ASSERT_EQUAL_INT(5, errors.size());
  ASSERT_CONTAINS(errors[0].c_str(), "ERROR PayloadTooSmall: ");
  ASSERT_CONTAINS(errors[0].c_str(), "below the minimum of 60 bytes");
  ASSERT_CONTAINS(errors[1].c_str(), "ERROR CrcMismatch: RUN body CRC-32 is 3610a686, RUN BEGIN announced 00000000");
  ASSERT_CONTAINS(errors[2].c_str(), "ERROR OutOfSequence: ");
  ASSERT_CONTAINS(errors[3].c_str(), "ERROR LineTooLong: ");
  ASSERT_CONTAINS(errors[4].c_str(), "ERROR ConnectRefused: ");
  size_t ready = 0;
  for (const std::string& s : l) ready += s == "READY";
  TEST_ASSERT_EQUAL_INT(7, ready);  // boot, 4 errors, abort, the run
  TEST_ASSERT_TRUE(std::find(l.begin(), l.end(), "ACK abort") != l.end());
  TEST_ASSERT_EQUAL_STRING("READY", l.back().c_str());
}

static void test_session_clock_exchanges_before_and_after(void) {
  Rig rig;
  add_run(&rig.io.in, std::string(kPlainBody) + "sync_host=127.0.0.1\nsync_port=9\nsync_count=3\n");
  std::vector<std::string> l = rig.run();
  std::vector<std::string> clock_lines, sync_lines;
  for (const std::string& s : l) {
    if (s.rfind("CLOCK ", 0) == 0) clock_lines.push_back(s);
    if (s.rfind("SYNC ", 0) == 0) sync_lines.push_back(s);
  }
  TEST_ASSERT_EQUAL_INT(6, clock_lines.size());
  ASSERT_CONTAINS(clock_lines[0].c_str(), "CLOCK phase=pre i=0 t1=");
  ASSERT_CONTAINS(clock_lines[3].c_str(), "CLOCK phase=post i=0 t1=");
  TEST_ASSERT_EQUAL_INT(2, sync_lines.size());
  TEST_ASSERT_EQUAL_STRING("SYNC phase=pre count=3 got=3 status=Ok", sync_lines[0].c_str());
  TEST_ASSERT_EQUAL_STRING("SYNC phase=post count=3 got=3 status=Ok", sync_lines[1].c_str());
  TEST_ASSERT_EQUAL_INT(2, rig.echo.opened);
  long long t1 = 0, t2 = 0, t3 = 0, t4 = 0;
  TEST_ASSERT_EQUAL_INT(4, sscanf(clock_lines[0].c_str(), "CLOCK phase=pre i=0 t1=%lld t2=%lld t3=%lld t4=%lld", &t1,
                                  &t2, &t3, &t4));
  TEST_ASSERT_EQUAL_INT(t1 + 5000, t2);
  TEST_ASSERT_TRUE(t4 > t1);
}

static void test_session_without_datagram_refuses_sync(void) {
  Rig rig;
  add_run(&rig.io.in, std::string(kPlainBody) + "sync_host=127.0.0.1\nsync_port=9\n");
  std::vector<std::string> l = rig.run(false);
  TEST_ASSERT_EQUAL_STRING("ERROR InvalidArgument: this board has no datagram socket for the clock exchanges (sync_host)",
                           l[l.size() - 2].c_str());
}

static void test_session_refuses_unknown_cipher_before_running(void) {
  Rig rig;
  std::string body = kPlainBody;
  body.replace(body.find("transport=plain"), 15, "transport=tls");
  add_run(&rig.io.in, body + "ca=x\nciphers=ECDHE-ECDSA-CHACHA20-POLY1305\n");
  std::vector<std::string> l = rig.run();
  ASSERT_CONTAINS(l[l.size() - 2].c_str(), "ERROR UnknownCipher: ");
  ASSERT_CONTAINS(l[l.size() - 2].c_str(), "ECDHE-ECDSA-CHACHA20-POLY1305");
}

// ------------------------------------------------------------ the option table (device_options.def)
static std::string expected_text(opt::Id id) {
  char text[160];
  opt::expected(opt::spec(id), text, sizeof(text));
  return text;
}

static void test_option_values_are_checked_by_kind(void) {
  using opt::Id;
  using opt::spec;
  TEST_ASSERT_TRUE(opt::valid(spec(Id::payload), "4096"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::payload), "4097"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::payload), "0"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::payload), "-1"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::payload), " 65"));
  TEST_ASSERT_TRUE(opt::valid(spec(Id::seed), "18446744073709551615"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::seed), "18446744073709551616"));
  TEST_ASSERT_TRUE(opt::valid(spec(Id::interval_ms), "0.5"));
  TEST_ASSERT_TRUE(opt::valid(spec(Id::interval_ms), "3.6e+06"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::interval_ms), "3600000.5"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::interval_ms), "inf"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::interval_ms), "5ms"));
  TEST_ASSERT_TRUE(opt::valid(spec(Id::close), "drop"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::close), "Drop"));
  TEST_ASSERT_FALSE(opt::valid(spec(Id::close), "dro"));
  TEST_ASSERT_TRUE(opt::valid(spec(Id::host), ""));
  TEST_ASSERT_EQUAL_STRING("an integer 1..4096", expected_text(Id::payload).c_str());
  TEST_ASSERT_EQUAL_STRING("milliseconds 0..3600000 (decimals allowed)", expected_text(Id::interval_ms).c_str());
  TEST_ASSERT_EQUAL_STRING("a number 0.01..10000 (decimals allowed)", expected_text(Id::connect_rate).c_str());
  TEST_ASSERT_EQUAL_STRING("persistent, reconnect, resume-id or resume-ticket", expected_text(Id::connection).c_str());
  TEST_ASSERT_EQUAL_STRING("plain or tls", expected_text(Id::transport).c_str());
  TEST_ASSERT_EQUAL_INT(kMaxPayload, spec(Id::payload).max);
  opt::Values v;
  TEST_ASSERT_EQUAL_INT(65, v.uint(Id::payload));  // the .def's defaults when not given
  TEST_ASSERT_EQUAL_STRING("disconnect", v.text(Id::close));
  v.set(Id::close, "drop");
  v.set(Id::interval_ms, "0.25");
  TEST_ASSERT_EQUAL_INT(1, v.choice(Id::close));
  TEST_ASSERT_TRUE(v.decimal(Id::interval_ms) == 0.25);
}

static void test_option_names_per_program(void) {
  const opt::Spec* s = opt::find("server-name", 11, TB_VDEVICE, true);
  TEST_ASSERT_TRUE(s != nullptr && strcmp(s->name, "server_name") == 0);
  TEST_ASSERT_TRUE(opt::find("server_name", 11, TB_VDEVICE, true) == nullptr);  // argv: dashes only
  TEST_ASSERT_TRUE(opt::find("server_name", 11, TB_BOARD, false) != nullptr);
  TEST_ASSERT_TRUE(opt::find("sync-host", 9, TB_VDEVICE, true) == nullptr);     // the board's own
  TEST_ASSERT_TRUE(opt::find("devices", 7, TB_FLEET, true) != nullptr);
  TEST_ASSERT_TRUE(opt::find("devices", 7, TB_VDEVICE, true) == nullptr);
  // The board takes exactly the TB_BOARD entries: every other one is an unknown RUN key.
  for (const opt::Spec& spec : opt::kSpecs) {
    ErrorText err;
    const Err got = parse_text(std::string(kPlainBody) + spec.name + "=1\n", &err);
    if ((spec.programs & TB_BOARD) != 0) {
      TEST_ASSERT_TRUE_MESSAGE(got != Err::UnknownKey, spec.name);
    } else {
      TEST_ASSERT_EQUAL_INT_MESSAGE(static_cast<int>(Err::UnknownKey), static_cast<int>(got), spec.name);
    }
  }
}

static Err check_run(const std::string& body, std::string* text, std::string* written) {
  Rig rig;
  BoardSession s(rig.io, rig.clock, rig.sensors, rig.port, rig.info, nullptr);
  std::vector<char> buf(body.begin(), body.end());
  buf.push_back('\0');
  const Err e = s.check_run(buf.data(), body.size());
  *text = s.error_text();
  *written = rig.io.out;
  return e;
}

static void test_check_run_stops_before_ack(void) {
  std::string text, written;
  ASSERT_OK(check_run(kPlainBody, &text, &written));
  TEST_ASSERT_TRUE(written.empty());  // nothing said on the line, nothing run
  std::string small = kPlainBody;
  small.replace(small.find("payload=65"), 10, "payload=40");
  ASSERT_ERR(Err::PayloadTooSmall, check_run(small, &text, &written));
  std::string tls = kPlainBody;
  tls.replace(tls.find("transport=plain"), 15, "transport=tls");
  ASSERT_ERR(Err::UnknownCipher, check_run(tls + "ca=x\nciphers=NOPE\n", &text, &written));
  ASSERT_CONTAINS(text.c_str(), "NOPE");
  ASSERT_ERR(Err::InvalidArgument, check_run(std::string(kPlainBody) + "sync_host=h\nsync_port=9\n", &text, &written));
  ASSERT_CONTAINS(text.c_str(), "sync_host");
  ASSERT_ERR(Err::UnknownKey, check_run(std::string(kPlainBody) + "seed=1\n", &text, &written));
  TEST_ASSERT_TRUE(written.empty());
}

static std::vector<std::string> msg_lines_at_qos(const char* qos) {
  Rig rig;
  FakeBroker broker;
  std::string body = kPlainBody;
  body.replace(body.find("qos=0"), 5, qos);
  add_run(&rig.io.in, body);
  rig.info.board = "test";
  BoardSession s(rig.io, rig.clock, rig.sensors, rig.port, rig.info, nullptr);
  s.set_transport_filter(&broker);
  s.boot();
  while (s.poll(10) == Err::Ok) {
  }
  std::vector<std::string> msgs;
  for (const std::string& l : rig.io.lines()) {
    if (l.rfind("MSG ", 0) == 0) msgs.push_back(l);
    if (l.rfind("ERROR ", 0) == 0) TEST_FAIL_MESSAGE(l.c_str());
  }
  return msgs;
}

// MSG carries puback_us (the PUBACK round trip, board monotonic clock) at QoS 1 only.
static void test_session_msg_has_puback_us_at_qos1_only(void) {
  std::vector<std::string> q1 = msg_lines_at_qos("qos=1");
  TEST_ASSERT_EQUAL_INT(3, q1.size());
  for (const std::string& m : q1) {
    size_t at = m.find(" puback_us=");
    TEST_ASSERT_TRUE_MESSAGE(at != std::string::npos, m.c_str());
    TEST_ASSERT_TRUE_MESSAGE(std::stoll(m.substr(at + 11)) > 0, m.c_str());  // StepClock: +10 us a read
  }
  ASSERT_CONTAINS(q1[0].c_str(), "MSG seq=0 t_send_us=");
  ASSERT_CONTAINS(q1[0].c_str(), " heap=1000 rssi=-60 puback_us=");
  std::vector<std::string> q0 = msg_lines_at_qos("qos=0");
  TEST_ASSERT_EQUAL_INT(3, q0.size());
  for (const std::string& m : q0) TEST_ASSERT_TRUE_MESSAGE(m.find("puback_us") == std::string::npos, m.c_str());
}

int main(int, char**) {
  UNITY_BEGIN();
  RUN_TEST(test_crc32_is_zlibs);
  RUN_TEST(test_base64_decode_strict);
  RUN_TEST(test_chunk_size_fits_the_receive_buffer);
  RUN_TEST(test_body_parses_every_key_and_unescapes);
  RUN_TEST(test_body_parses_the_mqtt_keys);
  RUN_TEST(test_body_refuses_with_named_causes);
  RUN_TEST(test_receiver_assembles_chunks);
  RUN_TEST(test_receiver_refuses_with_named_causes);
  RUN_TEST(test_session_banner_ready_hello_unknown);
  RUN_TEST(test_session_acks_every_chunk_then_runs);
  RUN_TEST(test_session_errors_then_ready_and_serves_the_next_run);
  RUN_TEST(test_session_clock_exchanges_before_and_after);
  RUN_TEST(test_session_without_datagram_refuses_sync);
  RUN_TEST(test_session_refuses_unknown_cipher_before_running);
  RUN_TEST(test_session_msg_has_puback_us_at_qos1_only);
  RUN_TEST(test_option_values_are_checked_by_kind);
  RUN_TEST(test_option_names_per_program);
  RUN_TEST(test_check_run_stops_before_ack);
  return UNITY_END();
}
