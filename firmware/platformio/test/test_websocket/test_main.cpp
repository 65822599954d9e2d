// Unit tests of the WebSocket client (lib/testbed_core/src/websocket.h): the frame codec against RFC 6455's own
// examples (section 5.7), the handshake key/accept pair of section 1.3, SHA-1 against FIPS 180's examples, and
// WsTransport over a scripted inner transport (no sockets): the upgrade request and its checked answer, one masked
// binary frame per write (7- and 16-bit lengths), unmasked frames down, ping -> pong, the broker's close.
#include <unity.h>

#include "../tb_test_assert.h"

#include <cstring>
#include <string>

#include "testbed_core.h"

using namespace tb;

void setUp(void) {}
void tearDown(void) {}

namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char k[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += std::string{k[p[i] >> 4], k[p[i] & 15]};
  return s;
}

class FakeClock : public Clock {
 public:
  int64_t t = 0;
  int64_t mono_us() override { return t += 100; }
  int64_t wall_us() override { return t; }
  void sleep_until_mono_us(int64_t until) override { t = until; }
};

// The broker's side in memory: what the client wrote, and what it reads (script); answer_upgrade() computes the
// 101 answer from the key the client sent.
class Scripted : public Transport {
 public:
  std::string written, script;
  size_t chunk = 1000;  // read_some hands over at most this many bytes at once
  bool closed = false, aborted = false;
  TransportStats st;
  Err open(const char*, uint16_t, uint32_t) override { return Err::Ok; }
  Err write_all(const uint8_t* d, size_t n) override {
    written.append(reinterpret_cast<const char*>(d), n);
    writes++;
    return Err::Ok;
  }
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t) override {
    *got = 0;
    if (script.empty()) return Err::RecvTimeout;
    size_t n = script.size() < cap ? script.size() : cap;
    if (n > chunk) n = chunk;
    memcpy(buf, script.data(), n);
    script.erase(0, n);
    *got = n;
    return Err::Ok;
  }
  void close() override { closed = true; }
  void abort() override { aborted = true; }
  const char* error_text() const override { return "scripted"; }
  const TransportStats& stats() const override { return st; }
  int writes = 0;
  std::string key() const {
    const size_t at = written.find("Sec-WebSocket-Key: ");
    return at == std::string::npos ? "" : written.substr(at + 19, 24);
  }
  std::string answer(const char* accept_override = nullptr, const char* extra = "") const {
    char accept[ws::kAcceptChars + 1];
    ws::accept_for(key().c_str(), accept);
    return std::string("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "sec-websocket-accept: ") + (accept_override ? accept_override : accept) +
           "\r\nSec-WebSocket-Protocol: mqtt\r\n" + extra + "\r\n";
  }
};

// Opens ws over `inner`: the client's request is written by the first read's time, so the script is answered
// then (the fake's script is filled lazily by this helper).
class Answering : public Scripted {
 public:
  const char* accept_override = nullptr;
  const char* extra = "";
  std::string after;  // frames the broker sends right behind its answer
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t t) override {
    if (!answered && !key().empty()) {
      script = answer(accept_override, extra) + after + script;
      answered = true;
    }
    return Scripted::read_some(buf, cap, got, t);
  }
  bool answered = false;
};

}  // namespace

void test_rfc6455_5_7_frames_decode() {
  const uint8_t unmasked[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
  ws::FrameHeader h;
  ASSERT_OK(ws::decode_header(unmasked, sizeof(unmasked), &h));
  TEST_ASSERT_TRUE(h.fin && !h.masked && h.opcode == ws::kOpText && h.length == 5 && h.header_len == 2);
  uint8_t masked[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
  ASSERT_OK(ws::decode_header(masked, sizeof(masked), &h));
  TEST_ASSERT_TRUE(h.masked && h.length == 5 && h.header_len == 6);
  ws::apply_mask(masked + 6, 5, h.mask);
  TEST_ASSERT_EQUAL_MEMORY("Hello", reinterpret_cast<const char*>(masked + 6), 5);
  const uint8_t first[] = {0x01, 0x03, 0x48, 0x65, 0x6c}, last[] = {0x80, 0x02, 0x6c, 0x6f};
  ASSERT_OK(ws::decode_header(first, sizeof(first), &h));
  TEST_ASSERT_TRUE(!h.fin && h.opcode == ws::kOpText && h.length == 3);
  ASSERT_OK(ws::decode_header(last, sizeof(last), &h));
  TEST_ASSERT_TRUE(h.fin && h.opcode == ws::kOpContinuation && h.length == 2);
  const uint8_t ping[] = {0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
  ASSERT_OK(ws::decode_header(ping, sizeof(ping), &h));
  TEST_ASSERT_TRUE(h.opcode == ws::kOpPing && h.length == 5);
  const uint8_t b256[] = {0x82, 0x7E, 0x01, 0x00}, b64k[] = {0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0};
  ASSERT_OK(ws::decode_header(b256, sizeof(b256), &h));
  TEST_ASSERT_TRUE(h.opcode == ws::kOpBinary && h.length == 256 && h.header_len == 4);
  ASSERT_OK(ws::decode_header(b64k, sizeof(b64k), &h));
  TEST_ASSERT_TRUE(h.length == 65536 && h.header_len == 10);
  ASSERT_ERR(Err::NeedMore, ws::decode_header(b64k, 9, &h));
}

void test_rfc6455_5_7_frames_encode() {
  uint8_t out[ws::kMaxHeader + 5];
  const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
  size_t n = ws::encode_header(out, ws::kOpText, 5, key);
  memcpy(out + n, "Hello", 5);
  ws::apply_mask(out + n, 5, key);
  TEST_ASSERT_EQUAL_STRING("818537fa213d7f9f4d5158", hex(out, n + 5).c_str());
  n = ws::encode_header(out, ws::kOpPong, 5, key);  // the section's masked Pong
  TEST_ASSERT_EQUAL_STRING("8a8537fa213d", hex(out, n).c_str());
  n = ws::encode_header(out, ws::kOpBinary, 256, nullptr);
  TEST_ASSERT_EQUAL_STRING("827e0100", hex(out, n).c_str());
  n = ws::encode_header(out, ws::kOpBinary, 65536, nullptr);
  TEST_ASSERT_EQUAL_STRING("827f0000000000010000", hex(out, n).c_str());
  n = ws::encode_header(out, ws::kOpBinary, 126, key);
  TEST_ASSERT_EQUAL_STRING("82fe007e37fa213d", hex(out, n).c_str());
  const size_t sizes[][3] = {{0, 2, 6}, {125, 2, 6}, {126, 4, 8}, {65535, 4, 8}, {65536, 10, 14}};
  for (const auto& s : sizes) {
    TEST_ASSERT_EQUAL_INT((int)(s[1]), (int)ws::header_size(s[0], false));
    TEST_ASSERT_EQUAL_INT((int)(s[2]), (int)ws::header_size(s[0], true));
  }
}

void test_malformed_headers_are_refused() {
  ws::FrameHeader h;
  const uint8_t rsv[] = {0xC2, 0x01}, long_ping[] = {0x89, 0x7E, 0x00, 0x80}, split_ping[] = {0x09, 0x00},
                short16[] = {0x82, 0x7E, 0x00, 0x10}, top_bit[] = {0x82, 0x7F, 0x80, 0, 0, 0, 0, 1, 0, 0};
  ASSERT_ERR(Err::Malformed, ws::decode_header(rsv, sizeof(rsv), &h));
  ASSERT_ERR(Err::Malformed, ws::decode_header(long_ping, sizeof(long_ping), &h));
  ASSERT_ERR(Err::Malformed, ws::decode_header(split_ping, sizeof(split_ping), &h));
  ASSERT_ERR(Err::Malformed, ws::decode_header(short16, sizeof(short16), &h));
  ASSERT_ERR(Err::Malformed, ws::decode_header(top_bit, sizeof(top_bit), &h));
}

void test_sha1_and_the_rfc6455_1_3_accept() {
  uint8_t d[20];
  ws::sha1(reinterpret_cast<const uint8_t*>("abc"), 3, d);
  TEST_ASSERT_EQUAL_STRING("a9993e364706816aba3e25717850c26c9cd0d89d", hex(d, 20).c_str());
  const char* two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 B: two padding blocks
  ws::sha1(reinterpret_cast<const uint8_t*>(two), strlen(two), d);
  TEST_ASSERT_EQUAL_STRING("84983e441c3bd26ebaae4aa1f95129e5e54670f1", hex(d, 20).c_str());
  char accept[ws::kAcceptChars + 1];
  ws::accept_for("dGhlIHNhbXBsZSBub25jZQ==", accept);
  TEST_ASSERT_EQUAL_STRING("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", accept);
  char b64[16];
  ws::base64(reinterpret_cast<const uint8_t*>("fo"), 2, b64);
  TEST_ASSERT_EQUAL_STRING("Zm8=", b64);
}

void test_upgrade_request_and_answer() {
  Answering inner;
  FakeClock clock;
  WsTransport t(inner, clock, 7);
  ASSERT_OK(t.open("broker", 8080, 1000));
  const std::string& req = inner.written;
  TEST_ASSERT_EQUAL_INT(0, static_cast<int>(req.find("GET /mqtt HTTP/1.1\r\nHost: broker:8080\r\n")));
  TEST_ASSERT_TRUE(req.find("\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n") != std::string::npos);
  TEST_ASSERT_TRUE(req.find("\r\nSec-WebSocket-Protocol: mqtt\r\nSec-WebSocket-Version: 13\r\n\r\n") !=
                   std::string::npos);
  TEST_ASSERT_TRUE(req.find("Sec-WebSocket-Extensions") == std::string::npos);  // no permessage-deflate
  TEST_ASSERT_EQUAL_INT((int)(24), (int)inner.key().size());
  TEST_ASSERT_TRUE(t.stats().ws_upgrade_us > 0);
}

void test_a_wrong_accept_subprotocol_or_status_is_refused() {
  FakeClock clock;
  Answering bad_accept;
  bad_accept.accept_override = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
  WsTransport a(bad_accept, clock, 1);
  ASSERT_ERR(Err::Protocol, a.open("b", 1, 100));
  TEST_ASSERT_TRUE(strstr(a.error_text(), "Sec-WebSocket-Accept") != nullptr);
  TEST_ASSERT_TRUE(bad_accept.aborted);
  Answering deflate;
  deflate.extra = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
  WsTransport b(deflate, clock, 1);
  ASSERT_ERR(Err::Protocol, b.open("b", 1, 100));
  Scripted refused;
  refused.script = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
  WsTransport c(refused, clock, 1);
  ASSERT_ERR(Err::Protocol, c.open("b", 1, 100));
  TEST_ASSERT_EQUAL_STRING("WebSocket upgrade refused: HTTP/1.1 404 Not Found", c.error_text());
}

void test_one_masked_frame_per_write_7_and_16_bit_lengths() {
  Answering inner;
  FakeClock clock;
  WsTransport t(inner, clock, 3);
  ASSERT_OK(t.open("b", 1, 100));
  const size_t lens[] = {2, 125, 126, 300};
  for (size_t len : lens) {
    inner.written.clear();
    const int before = inner.writes;
    uint8_t data[300];
    for (size_t i = 0; i < len; ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
    ASSERT_OK(t.write_all(data, len));
    TEST_ASSERT_EQUAL_INT(before + 1, inner.writes);  // one inner write: over TLS, one record
    ws::FrameHeader h;
    uint8_t* w = reinterpret_cast<uint8_t*>(&inner.written[0]);
    ASSERT_OK(ws::decode_header(w, inner.written.size(), &h));
    TEST_ASSERT_TRUE(h.fin && h.masked && h.opcode == ws::kOpBinary && h.length == len);
    TEST_ASSERT_EQUAL_INT((int)ws::header_size(len, true), (int)h.header_len);
    TEST_ASSERT_EQUAL_INT((int)(h.header_len + len), (int)inner.written.size());
    ws::apply_mask(w + h.header_len, len, h.mask);
    TEST_ASSERT_EQUAL_MEMORY(data, w + h.header_len, len);
  }
}

void test_unmasked_frames_down_ping_pong_and_close() {
  Answering inner;
  inner.chunk = 3;  // frames arrive in pieces
  std::string big(200, 'x');
  inner.after = std::string("\x89\x02hi", 4) + std::string("\x82\x7e\x00\xc8", 4) + big +
                std::string("\x82\x02\x20\x00", 4) + std::string("\x88\x02\x03\xe9", 4);
  FakeClock clock;
  WsTransport t(inner, clock, 5);
  ASSERT_OK(t.open("b", 1, 100));
  inner.written.clear();
  uint8_t buf[256];
  { Err e_ = t.read_exact(buf, 200, 100); TEST_ASSERT_TRUE_MESSAGE(e_ == Err::Ok, t.error_text()); }
  TEST_ASSERT_EQUAL_MEMORY(big.data(), buf, 200);
  ws::FrameHeader h;  // the ping was answered with a masked pong carrying its payload
  uint8_t* w = reinterpret_cast<uint8_t*>(&inner.written[0]);
  ASSERT_OK(ws::decode_header(w, inner.written.size(), &h));
  TEST_ASSERT_TRUE(h.opcode == ws::kOpPong && h.masked && h.length == 2);
  ws::apply_mask(w + h.header_len, 2, h.mask);
  TEST_ASSERT_EQUAL_MEMORY("hi", reinterpret_cast<const char*>(w + h.header_len), 2);
  ASSERT_OK(t.read_exact(buf, 2, 100));
  TEST_ASSERT_EQUAL_INT((int)(0x20), (int)buf[0]);
  inner.written.clear();
  size_t got = 0;
  ASSERT_ERR(Err::PeerClosed, t.read_some(buf, sizeof(buf), &got, 100));
  TEST_ASSERT_EQUAL_STRING("the broker closed the WebSocket (status 1001)", t.error_text());
  w = reinterpret_cast<uint8_t*>(&inner.written[0]);
  ASSERT_OK(ws::decode_header(w, inner.written.size(), &h));
  TEST_ASSERT_TRUE(h.opcode == ws::kOpClose && h.masked && h.length == 2);
  TEST_ASSERT_TRUE(inner.closed);
}

void test_a_masked_or_text_frame_from_the_broker_is_refused() {
  Answering inner;
  inner.after = std::string("\x81\x01" "a", 3);
  FakeClock clock;
  WsTransport t(inner, clock, 5);
  ASSERT_OK(t.open("b", 1, 100));
  uint8_t buf[8];
  size_t got = 0;
  ASSERT_ERR(Err::Protocol, t.read_some(buf, sizeof(buf), &got, 100));
}

void test_close_sends_a_close_frame_abort_does_not() {
  Answering inner;
  FakeClock clock;
  WsTransport t(inner, clock, 9);
  ASSERT_OK(t.open("b", 1, 100));
  inner.written.clear();
  t.close();
  ws::FrameHeader h;
  uint8_t* w = reinterpret_cast<uint8_t*>(&inner.written[0]);
  ASSERT_OK(ws::decode_header(w, inner.written.size(), &h));
  TEST_ASSERT_TRUE(h.opcode == ws::kOpClose && h.masked && h.length == 2 && inner.closed);
  ws::apply_mask(w + h.header_len, 2, h.mask);
  TEST_ASSERT_EQUAL_STRING("03e8", hex(w + h.header_len, 2).c_str());
  Answering second;
  WsTransport u(second, clock, 9);
  ASSERT_OK(u.open("b", 1, 100));
  second.written.clear();
  u.abort();
  TEST_ASSERT_TRUE(second.written.empty() && second.aborted);
}

int main(int, char**) {
  UNITY_BEGIN();
  RUN_TEST(test_rfc6455_5_7_frames_decode);
  RUN_TEST(test_rfc6455_5_7_frames_encode);
  RUN_TEST(test_malformed_headers_are_refused);
  RUN_TEST(test_sha1_and_the_rfc6455_1_3_accept);
  RUN_TEST(test_upgrade_request_and_answer);
  RUN_TEST(test_a_wrong_accept_subprotocol_or_status_is_refused);
  RUN_TEST(test_one_masked_frame_per_write_7_and_16_bit_lengths);
  RUN_TEST(test_unmasked_frames_down_ping_pong_and_close);
  RUN_TEST(test_a_masked_or_text_frame_from_the_broker_is_refused);
  RUN_TEST(test_close_sends_a_close_frame_abort_does_not);
  return UNITY_END();
}
