// Unit tests of time_sync (lib/testbed_core/src/time_sync.h): the wire format, byte by byte from the
// table in the header, and the client's exchange logic against a scripted in-memory server on a
// simulated clock (no sockets, so `pio test -e native` runs it too). The client against the real
// Python server over UDP is tests/unit/analysis/test_clock.py.
#include <unity.h>

#include "../tb_test_assert.h"

#include <cstring>

#include "testbed_core.h"

using namespace tb;

void setUp(void) {}
void tearDown(void) {}

#define ASSERT_I64(expected, actual) TEST_ASSERT_TRUE_MESSAGE((expected) == (actual), #actual " != " #expected)

namespace {

namespace w = timesync_wire;

// Board clock: mono and wall move only when the test (or a wait) moves them.
class SimClock : public Clock {
 public:
  int64_t mono = 1000000;
  int64_t wall_minus_mono = 1764470000000000;
  int64_t mono_us() override { return mono; }
  int64_t wall_us() override { return mono + wall_minus_mono; }
  void sleep_until_mono_us(int64_t t) override {
    if (t > mono) mono = t;
  }
};

enum class Fault { None, Drop, Late, StaleFirst, Duplicate, SendFails };

// A time-echo server in memory. Its clock = board wall clock + server_offset_us; a request arrives
// after fwd_us, is held hold_us, the reply arrives after back_us (all in board microseconds).
class ScriptedServer : public Datagram {
 public:
  explicit ScriptedServer(SimClock& clock) : clock_(clock) {}

  int64_t server_offset_us = 250000;
  int64_t fwd_us = 1500, hold_us = 40, back_us = 900;
  Fault faults[16] = {};  // by seq
  Err open_result = Err::Ok;
  int opens = 0, closes = 0, sends = 0;
  bool is_open = false;

  Err open(const char*, uint16_t) override {
    ++opens;
    is_open = open_result == Err::Ok;
    return open_result;
  }
  void close() override {
    ++closes;
    is_open = false;
  }
  Err send(const uint8_t* data, size_t len) override {
    TEST_ASSERT_TRUE(is_open);
    TEST_ASSERT_EQUAL_INT(w::kSize, len);
    uint32_t seq = (uint32_t(data[8]) << 24) | (uint32_t(data[9]) << 16) | (uint32_t(data[10]) << 8) | data[11];
    Fault f = seq < 16 ? faults[seq] : Fault::None;
    ++sends;
    if (f == Fault::SendFails) return Err::Send;
    if (f == Fault::Drop) return Err::Ok;
    int64_t t1 = 0;
    for (int i = 0; i < 8; ++i) t1 = static_cast<int64_t>((static_cast<uint64_t>(t1) << 8) | data[16 + i]);
    const int64_t t2 = clock_.wall_us() + fwd_us + server_offset_us;
    w::Reply r{0, seq, t1, t2, t2 + hold_us};
    const int64_t arrive = clock_.mono + fwd_us + hold_us + back_us;
    if (f == Fault::StaleFirst) {
      uint8_t junk[60];
      memset(junk, 0xAB, sizeof(junk));
      push(junk, sizeof(junk), arrive - 50);                 // too long
      push(reinterpret_cast<const uint8_t*>("hello"), 5, arrive - 40);  // too short
      w::Reply old = r;
      old.seq = seq - 1;
      push_reply(old, arrive - 30);  // an earlier exchange's seq
      old = r;
      old.t1_us = t1 - 10000;
      push_reply(old, arrive - 20);  // right seq, another call's t1
      uint8_t bad[w::kSize];
      w::encode_reply(r, bad);
      bad[4] = 2;
      push(bad, sizeof(bad), arrive - 10);  // a future version
    }
    push_reply(r, f == Fault::Late ? clock_.mono + int64_t(kTimeSyncReplyTimeoutMs) * 1000 + 5000 : arrive);
    if (f == Fault::Duplicate) push_reply(r, arrive + 100);
    return Err::Ok;
  }
  Err recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) override {
    TEST_ASSERT_TRUE(is_open);
    const int64_t limit = clock_.mono + int64_t(timeout_ms) * 1000;
    int best = -1;
    for (int i = 0; i < n_; ++i) {
      if (q_[i].at <= limit && (best < 0 || q_[i].at < q_[best].at)) best = i;
    }
    if (best < 0) {
      clock_.mono = limit;
      return Err::RecvTimeout;
    }
    if (q_[best].at > clock_.mono) clock_.mono = q_[best].at;
    *len = q_[best].len < cap ? q_[best].len : cap;
    memcpy(buf, q_[best].bytes, *len);
    q_[best] = q_[--n_];
    return Err::Ok;
  }

 private:
  struct Pending {
    int64_t at;
    uint8_t bytes[64];
    size_t len;
  };
  void push(const uint8_t* data, size_t len, int64_t at) {
    TEST_ASSERT_TRUE(n_ < 32);
    q_[n_].at = at;
    memcpy(q_[n_].bytes, data, len);
    q_[n_].len = len;
    ++n_;
  }
  void push_reply(const w::Reply& r, int64_t at) {
    uint8_t b[w::kSize];
    w::encode_reply(r, b);
    push(b, sizeof(b), at);
  }
  SimClock& clock_;
  Pending q_[32];
  int n_ = 0;
};

// Every sample must be the exact exchange of the script (asymmetric delays, hold time).
void check_sample(const ScriptedServer& s, const TimeSample& x) {
  ASSERT_I64(s.server_offset_us + s.fwd_us, x.t2_us - x.t1_us);
  ASSERT_I64(s.hold_us, x.t3_us - x.t2_us);
  ASSERT_I64(s.fwd_us + s.hold_us + s.back_us, x.t4_us - x.t1_us);
}

}  // namespace

// ------------------------------------------------------------ wire format (table in time_sync.h)
static void test_request_bytes_follow_the_table(void) {
  uint8_t out[w::kSize];
  memset(out, 0xEE, sizeof(out));
  w::encode_request(0x01020304u, 0x1122334455667788LL, out);
  const uint8_t expected[40] = {'T', 'B', 'T', 'S', 1, 1, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0,
                                0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  TEST_ASSERT_EQUAL_HEX8_ARRAY(expected, out, 40);
}

static void test_reply_decodes_from_hand_written_bytes(void) {
  const uint8_t bytes[40] = {'T', 'B', 'T', 'S', 1, 2, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0,
                             0, 0, 0, 0, 0, 0, 0x01, 0x00,   // t1 = 256
                             0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE,  // t2 = -2
                             0, 0, 0, 0, 0, 0, 0, 0x05};     // t3 = 5
  w::Reply r;
  ASSERT_OK(w::decode_reply(bytes, sizeof(bytes), &r));
  TEST_ASSERT_EQUAL_INT(w::kFlagKernelRxTimestamp, r.flags);
  TEST_ASSERT_EQUAL_UINT32(7, r.seq);
  ASSERT_I64(int64_t(256), r.t1_us);
  ASSERT_I64(int64_t(-2), r.t2_us);
  ASSERT_I64(int64_t(5), r.t3_us);
  uint8_t again[40];
  w::encode_reply(r, again);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(bytes, again, 40);
}

static void test_reply_refusals_are_named(void) {
  w::Reply r{0, 9, 1764470000000000LL, 1764470000001000LL, 1764470000001040LL};
  uint8_t b[w::kSize];
  w::Reply out;
  w::encode_reply(r, b);
  ASSERT_ERR(Err::Malformed, w::decode_reply(b, w::kSize - 1, &out));
  ASSERT_ERR(Err::Malformed, w::decode_reply(b, w::kSize + 1, &out));
  b[0] = 'X';
  ASSERT_ERR(Err::Malformed, w::decode_reply(b, w::kSize, &out));
  w::encode_reply(r, b);
  b[4] = 2;
  ASSERT_ERR(Err::Protocol, w::decode_reply(b, w::kSize, &out));
  w::encode_request(9, r.t1_us, b);  // a request echoed back is not a reply
  ASSERT_ERR(Err::Malformed, w::decode_reply(b, w::kSize, &out));
  r.t3_us = r.t2_us - 1;  // sent before it was received
  w::encode_reply(r, b);
  ASSERT_ERR(Err::Malformed, w::decode_reply(b, w::kSize, &out));
  ASSERT_ERR(Err::InvalidArgument, w::decode_reply(nullptr, w::kSize, &out));
}

// ------------------------------------------------------------ the client
static void test_every_exchange_is_sampled_and_stamped_on_the_right_clocks(void) {
  SimClock clock;
  ScriptedServer server(clock);
  TimeSample out[8];
  uint32_t got = 99;
  ASSERT_OK(time_sync(server, clock, "192.0.2.10", 9123, 8, out, &got));
  TEST_ASSERT_EQUAL_UINT32(8, got);
  for (uint32_t i = 0; i < got; ++i) check_sample(server, out[i]);
  for (uint32_t i = 1; i < got; ++i) TEST_ASSERT_TRUE(out[i].t1_us - out[i - 1].t4_us >= int64_t(kTimeSyncGapMs) * 1000);
  TEST_ASSERT_EQUAL_INT(1, server.opens);
  TEST_ASSERT_EQUAL_INT(1, server.closes);
  TEST_ASSERT_FALSE(server.is_open);
}

static void test_a_lost_reply_times_out_and_the_next_exchange_goes_on(void) {
  SimClock clock;
  ScriptedServer server(clock);
  server.faults[2] = Fault::Drop;
  server.faults[5] = Fault::Late;  // arrives after the timeout, during exchange 6: must be ignored
  TimeSample out[8];
  uint32_t got = 0;
  const int64_t start = clock.mono;
  ASSERT_OK(time_sync(server, clock, "lab", 9123, 8, out, &got));
  TEST_ASSERT_EQUAL_UINT32(6, got);
  for (uint32_t i = 0; i < got; ++i) check_sample(server, out[i]);
  TEST_ASSERT_EQUAL_INT(8, server.sends);
  TEST_ASSERT_TRUE(clock.mono - start >= 2 * int64_t(kTimeSyncReplyTimeoutMs) * 1000);
}

static void test_garbage_stale_and_duplicate_replies_are_discarded(void) {
  SimClock clock;
  ScriptedServer server(clock);
  for (int i = 0; i < 6; ++i) server.faults[i] = (i % 2 == 0) ? Fault::StaleFirst : Fault::Duplicate;
  TimeSample out[6];
  uint32_t got = 0;
  ASSERT_OK(time_sync(server, clock, "lab", 9123, 6, out, &got));
  TEST_ASSERT_EQUAL_UINT32(6, got);
  for (uint32_t i = 0; i < got; ++i) check_sample(server, out[i]);
}

static void test_no_reply_at_all_is_time_sync_no_reply(void) {
  SimClock clock;
  ScriptedServer server(clock);
  for (Fault& f : server.faults) f = Fault::Drop;
  TimeSample out[3];
  uint32_t got = 42;
  ASSERT_ERR(Err::TimeSyncNoReply, time_sync(server, clock, "lab", 9123, 3, out, &got));
  TEST_ASSERT_EQUAL_UINT32(0, got);
  TEST_ASSERT_EQUAL_INT(3, server.sends);
  TEST_ASSERT_FALSE(server.is_open);
}

static void test_open_and_send_failures_are_returned(void) {
  SimClock clock;
  ScriptedServer server(clock);
  server.open_result = Err::Dns;
  TimeSample out[4];
  uint32_t got = 0;
  ASSERT_ERR(Err::Dns, time_sync(server, clock, "nowhere", 9123, 4, out, &got));
  TEST_ASSERT_EQUAL_INT(0, server.sends);
  ScriptedServer second(clock);
  second.faults[2] = Fault::SendFails;
  ASSERT_ERR(Err::Send, time_sync(second, clock, "lab", 9123, 4, out, &got));
  TEST_ASSERT_EQUAL_UINT32(2, got);  // the samples taken before the failure are kept
  TEST_ASSERT_EQUAL_INT(3, second.sends);
  TEST_ASSERT_FALSE(second.is_open);
}

static void test_bad_arguments_are_refused(void) {
  SimClock clock;
  ScriptedServer server(clock);
  TimeSample out[1];
  uint32_t got = 5;
  ASSERT_ERR(Err::InvalidArgument, time_sync(server, clock, "lab", 9123, 0, out, &got));
  TEST_ASSERT_EQUAL_UINT32(0, got);
  ASSERT_ERR(Err::InvalidArgument, time_sync(server, clock, "lab", 9123, 1, nullptr, &got));
  ASSERT_ERR(Err::InvalidArgument, time_sync(server, clock, nullptr, 9123, 1, out, &got));
  ASSERT_ERR(Err::InvalidArgument, time_sync(server, clock, "lab", 9123, 1, out, nullptr));
  TEST_ASSERT_EQUAL_INT(0, server.opens);
  TEST_ASSERT_EQUAL_STRING("TimeSyncNoReply", err_name(Err::TimeSyncNoReply));
}

int main(int, char**) {
  UNITY_BEGIN();
  RUN_TEST(test_request_bytes_follow_the_table);
  RUN_TEST(test_reply_decodes_from_hand_written_bytes);
  RUN_TEST(test_reply_refusals_are_named);
  RUN_TEST(test_every_exchange_is_sampled_and_stamped_on_the_right_clocks);
  RUN_TEST(test_a_lost_reply_times_out_and_the_next_exchange_goes_on);
  RUN_TEST(test_garbage_stale_and_duplicate_replies_are_discarded);
  RUN_TEST(test_no_reply_at_all_is_time_sync_no_reply);
  RUN_TEST(test_open_and_send_failures_are_returned);
  RUN_TEST(test_bad_arguments_are_refused);
  return UNITY_END();
}
