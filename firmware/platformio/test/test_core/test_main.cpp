// Unit tests of the portable core. Runs with PlatformIO's Unity (`pio test -e native`) and with
// host/unity/unity.h under CMake/ctest. Expected MQTT bytes are written out by hand from the
// MQTT 3.1.1 specification (sections 2.2.3 and 3.1-3.14), not produced by the encoder.
#include <unity.h>

#include "../tb_test_assert.h"

#include <cstdio>
#include <cstring>

#include "mbedtls/ssl.h"
#include "testbed_core.h"

using namespace tb;

void setUp(void) {}
void tearDown(void) {}


// ------------------------------------------------------------ remaining length (spec 2.2.3, table 2.4)
static void check_rl(uint32_t value, const uint8_t* expected, size_t n) {
  uint8_t out[4];
  TEST_ASSERT_EQUAL_INT(n, mqtt::encode_remaining_length(value, out));
  TEST_ASSERT_EQUAL_HEX8_ARRAY(expected, out, n);
  uint32_t back = 0;
  size_t used = 0;
  ASSERT_OK(mqtt::decode_remaining_length(out, n, &back, &used));
  TEST_ASSERT_EQUAL_UINT32(value, back);
  TEST_ASSERT_EQUAL_INT(n, used);
}

static void test_remaining_length_table_2_4(void) {
  const uint8_t b0[] = {0x00};
  const uint8_t b127[] = {0x7F};
  const uint8_t b128[] = {0x80, 0x01};
  const uint8_t b16383[] = {0xFF, 0x7F};
  const uint8_t b16384[] = {0x80, 0x80, 0x01};
  const uint8_t b2097151[] = {0xFF, 0xFF, 0x7F};
  const uint8_t b2097152[] = {0x80, 0x80, 0x80, 0x01};
  const uint8_t b268435455[] = {0xFF, 0xFF, 0xFF, 0x7F};
  check_rl(0, b0, 1);
  check_rl(127, b127, 1);
  check_rl(128, b128, 2);
  check_rl(16383, b16383, 2);
  check_rl(16384, b16384, 3);
  check_rl(2097151, b2097151, 3);
  check_rl(2097152, b2097152, 4);
  check_rl(268435455, b268435455, 4);
  uint8_t out[4];
  TEST_ASSERT_EQUAL_INT(0, mqtt::encode_remaining_length(268435456u, out));
}

static void test_remaining_length_malformed_and_truncated(void) {
  const uint8_t five[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x7F};
  uint32_t v = 0;
  size_t used = 0;
  ASSERT_ERR(Err::Malformed, mqtt::decode_remaining_length(five, sizeof(five), &v, &used));
  const uint8_t cont[] = {0x80, 0x80};
  ASSERT_ERR(Err::NeedMore, mqtt::decode_remaining_length(cont, sizeof(cont), &v, &used));
  ASSERT_ERR(Err::NeedMore, mqtt::decode_remaining_length(cont, 0, &v, &used));
}

// ------------------------------------------------------------ CONNECT (spec 3.1)
static void test_connect_minimal_clean_session(void) {
  mqtt::ConnectOptions o;
  o.client_id = "v1";
  o.keepalive_s = 60;
  o.clean_session = true;
  uint8_t out[64];
  size_t len = 0;
  ASSERT_OK(mqtt::encode_connect(o, out, sizeof(out), &len));
  const uint8_t expected[] = {0x10, 14,  0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04,
                              0x02, 0x00, 60,  0x00, 0x02, 'v', '1'};
  TEST_ASSERT_EQUAL_INT(sizeof(expected), len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(expected, out, len);
}

static void test_connect_with_username_password(void) {
  mqtt::ConnectOptions o;
  o.client_id = "c";
  o.username = "u";
  o.password = "pw";
  o.keepalive_s = 0x0102;
  o.clean_session = false;
  uint8_t out[64];
  size_t len = 0;
  ASSERT_OK(mqtt::encode_connect(o, out, sizeof(out), &len));
  const uint8_t expected[] = {0x10, 20,   0x00, 0x04, 'M',  'Q', 'T',  'T',  0x04, 0xC0, 0x01,
                              0x02, 0x00, 0x01, 'c',  0x00, 0x01, 'u', 0x00, 0x02, 'p',  'w'};
  TEST_ASSERT_EQUAL_INT(sizeof(expected), len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(expected, out, len);
  mqtt::ConnectView v;
  ASSERT_OK(mqtt::decode_connect(out, len, &v));
  TEST_ASSERT_EQUAL_INT(0x0102, v.keepalive_s);
  TEST_ASSERT_TRUE(v.has_username && v.has_password && !v.clean_session);
  TEST_ASSERT_EQUAL_INT(2, v.password_len);
}

static void test_connect_refuses_what_the_spec_forbids(void) {
  uint8_t out[64];
  size_t len = 0;
  mqtt::ConnectOptions o;
  o.client_id = "v1";
  o.password = "secret";  // password flag without user name flag (3.1.2.9)
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_connect(o, out, sizeof(out), &len));
  mqtt::ConnectOptions empty;
  empty.client_id = "";
  empty.clean_session = false;  // zero-byte client id needs clean session (3.1.3.1)
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_connect(empty, out, sizeof(out), &len));
  mqtt::ConnectOptions small;
  small.client_id = "v1";
  ASSERT_ERR(Err::BufferTooSmall, mqtt::encode_connect(small, out, 10, &len));
}

static void test_decode_connect_rejects_malformed(void) {
  // reserved flag bit 0 set
  const uint8_t reserved[] = {0x10, 14, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x03, 0x00, 60, 0x00, 0x02, 'v', '1'};
  mqtt::ConnectView v;
  ASSERT_ERR(Err::Malformed, mqtt::decode_connect(reserved, sizeof(reserved), &v));
  // wrong protocol name
  const uint8_t name[] = {0x10, 14, 0x00, 0x04, 'M', 'Q', 'T', 'X', 0x04, 0x02, 0x00, 60, 0x00, 0x02, 'v', '1'};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connect(name, sizeof(name), &v));
  // client id length runs past the packet
  const uint8_t overrun[] = {0x10, 14, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 60, 0x00, 0x09, 'v', '1'};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connect(overrun, sizeof(overrun), &v));
}

// ------------------------------------------------------------ PUBLISH (spec 3.3)
static void test_publish_qos0(void) {
  uint8_t out[64];
  size_t len = 0;
  const uint8_t payload[] = {'h', 'i'};
  ASSERT_OK(mqtt::encode_publish("a/b", payload, 2, 0, 0, false, false, out, sizeof(out), &len));
  const uint8_t expected[] = {0x30, 0x07, 0x00, 0x03, 'a', '/', 'b', 'h', 'i'};
  TEST_ASSERT_EQUAL_INT(sizeof(expected), len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(expected, out, len);
}

static void test_publish_qos1_retain_dup(void) {
  uint8_t out[64];
  size_t len = 0;
  const uint8_t payload[] = {'h', 'i'};
  ASSERT_OK(mqtt::encode_publish("a/b", payload, 2, 1, 10, true, true, out, sizeof(out), &len));
  const uint8_t expected[] = {0x3B, 0x09, 0x00, 0x03, 'a', '/', 'b', 0x00, 0x0A, 'h', 'i'};
  TEST_ASSERT_EQUAL_INT(sizeof(expected), len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(expected, out, len);
  mqtt::PublishView v;
  ASSERT_OK(mqtt::decode_publish(out, len, &v));
  TEST_ASSERT_EQUAL_INT(1, v.qos);
  TEST_ASSERT_EQUAL_INT(10, v.packet_id);
  TEST_ASSERT_TRUE(v.retain && v.dup);
  TEST_ASSERT_EQUAL_INT(2, v.payload_len);
  TEST_ASSERT_EQUAL_MEMORY("hi", v.payload, 2);
}

static void test_publish_two_byte_remaining_length(void) {
  // topic "testbed/sensors" (15 B) + 200 B payload: remaining 217 = 0xD9 0x01
  static uint8_t payload[200];
  memset(payload, 'x', sizeof(payload));
  static uint8_t out[300];
  size_t len = 0;
  ASSERT_OK(mqtt::encode_publish("testbed/sensors", payload, sizeof(payload), 0, 0, false, false, out,
                                 sizeof(out), &len));
  const uint8_t head[] = {0x30, 0xD9, 0x01, 0x00, 0x0F, 't', 'e', 's', 't', 'b', 'e', 'd', '/'};
  TEST_ASSERT_EQUAL_INT(3 + 217, len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(head, out, sizeof(head));
}

static void test_publish_refuses_invalid(void) {
  uint8_t out[64];
  size_t len = 0;
  const uint8_t p[] = {'x'};
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("a/+", p, 1, 0, 0, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("a/#", p, 1, 0, 0, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("", p, 1, 0, 0, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("t", p, 1, 1, 0, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("t", p, 1, 0, 5, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("t", p, 1, 0, 0, false, true, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("t", p, 1, 3, 1, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish("t", p, 1, 2, 0, false, false, out, sizeof(out), &len));
  ASSERT_ERR(Err::BufferTooSmall, mqtt::encode_publish("t", p, 1, 0, 0, false, false, out, 5, &len));
  const char bad_utf8[] = {'a', static_cast<char>(0xC0), static_cast<char>(0x80), 0};
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_publish(bad_utf8, p, 1, 0, 0, false, false, out, sizeof(out), &len));
}

static void test_decode_publish_rejects_malformed(void) {
  mqtt::PublishView v;
  const uint8_t qos3[] = {0x36, 0x05, 0x00, 0x01, 't', 0x00, 0x01};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(qos3, sizeof(qos3), &v));
  const uint8_t topic_overrun[] = {0x30, 0x03, 0x00, 0x05, 't'};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(topic_overrun, sizeof(topic_overrun), &v));
  const uint8_t id_zero[] = {0x32, 0x05, 0x00, 0x01, 't', 0x00, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(id_zero, sizeof(id_zero), &v));
  const uint8_t dup_qos0[] = {0x38, 0x03, 0x00, 0x01, 't'};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(dup_qos0, sizeof(dup_qos0), &v));
  const uint8_t wildcard[] = {0x30, 0x03, 0x00, 0x01, '#'};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(wildcard, sizeof(wildcard), &v));
  const uint8_t surrogate[] = {0x30, 0x05, 0x00, 0x03, 0xED, 0xA0, 0x80};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(surrogate, sizeof(surrogate), &v));
  const uint8_t nul[] = {0x30, 0x03, 0x00, 0x01, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(nul, sizeof(nul), &v));
  const uint8_t truncated[] = {0x30, 0x07, 0x00, 0x03, 'a', '/'};
  ASSERT_ERR(Err::Malformed, mqtt::decode_publish(truncated, sizeof(truncated), &v));
  const uint8_t trailing_is_payload[] = {0x30, 0x04, 0x00, 0x01, 't', 'p'};
  ASSERT_OK(mqtt::decode_publish(trailing_is_payload, sizeof(trailing_is_payload), &v));
  TEST_ASSERT_EQUAL_INT(1, v.payload_len);
}

// ------------------------------------------------------------ small packets (spec 3.2, 3.4, 3.12-3.14)
static void test_small_packets_exact_bytes(void) {
  uint8_t out[8];
  size_t len = 0;
  const uint8_t puback[] = {0x40, 0x02, 0x00, 0x0A};
  ASSERT_OK(mqtt::encode_puback(10, out, sizeof(out), &len));
  TEST_ASSERT_EQUAL_INT(4, len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(puback, out, 4);
  const uint8_t pingreq[] = {0xC0, 0x00};
  ASSERT_OK(mqtt::encode_pingreq(out, sizeof(out), &len));
  TEST_ASSERT_EQUAL_INT(2, len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(pingreq, out, 2);
  const uint8_t pingresp[] = {0xD0, 0x00};
  ASSERT_OK(mqtt::encode_pingresp(out, sizeof(out), &len));
  TEST_ASSERT_EQUAL_HEX8_ARRAY(pingresp, out, 2);
  const uint8_t disconnect[] = {0xE0, 0x00};
  ASSERT_OK(mqtt::encode_disconnect(out, sizeof(out), &len));
  TEST_ASSERT_EQUAL_INT(2, len);
  TEST_ASSERT_EQUAL_HEX8_ARRAY(disconnect, out, 2);
  const uint8_t connack[] = {0x20, 0x02, 0x01, 0x00};
  ASSERT_OK(mqtt::encode_connack(true, 0, out, sizeof(out), &len));
  TEST_ASSERT_EQUAL_HEX8_ARRAY(connack, out, 4);
  ASSERT_ERR(Err::InvalidArgument, mqtt::encode_puback(0, out, sizeof(out), &len));
}

static void test_decode_connack(void) {
  bool sp = true;
  uint8_t rc = 9;
  const uint8_t ok[] = {0x20, 0x02, 0x00, 0x00};
  ASSERT_OK(mqtt::decode_connack(ok, 4, &sp, &rc));
  TEST_ASSERT_FALSE(sp);
  TEST_ASSERT_EQUAL_INT(0, rc);
  const uint8_t refused[] = {0x20, 0x02, 0x00, 0x05};
  ASSERT_OK(mqtt::decode_connack(refused, 4, &sp, &rc));
  TEST_ASSERT_EQUAL_INT(5, rc);
  TEST_ASSERT_EQUAL_STRING("not authorized", mqtt::connack_reason(rc));
  const uint8_t reserved_bits[] = {0x20, 0x02, 0x02, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(reserved_bits, 4, &sp, &rc));
  const uint8_t bad_rc[] = {0x20, 0x02, 0x00, 0x06};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(bad_rc, 4, &sp, &rc));
  const uint8_t sp_with_error[] = {0x20, 0x02, 0x01, 0x04};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(sp_with_error, 4, &sp, &rc));
  const uint8_t long_rl[] = {0x20, 0x03, 0x00, 0x00, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(long_rl, 5, &sp, &rc));
  const uint8_t flags[] = {0x21, 0x02, 0x00, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(flags, 4, &sp, &rc));
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(ok, 3, &sp, &rc));
  const uint8_t wrong_type[] = {0x40, 0x02, 0x00, 0x01};
  ASSERT_ERR(Err::Malformed, mqtt::decode_connack(wrong_type, 4, &sp, &rc));
}

static void test_decode_puback_pingresp(void) {
  uint16_t id = 0;
  const uint8_t ok[] = {0x40, 0x02, 0x12, 0x34};
  ASSERT_OK(mqtt::decode_puback(ok, 4, &id));
  TEST_ASSERT_EQUAL_HEX16(0x1234, id);
  const uint8_t zero[] = {0x40, 0x02, 0x00, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_puback(zero, 4, &id));
  const uint8_t flags[] = {0x42, 0x02, 0x00, 0x01};
  ASSERT_ERR(Err::Malformed, mqtt::decode_puback(flags, 4, &id));
  const uint8_t pr[] = {0xD0, 0x00};
  ASSERT_OK(mqtt::decode_pingresp(pr, 2));
  const uint8_t pr_len[] = {0xD0, 0x01, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_pingresp(pr_len, 3));
  mqtt::FixedHeader h;
  const uint8_t type0[] = {0x00, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_fixed_header(type0, 2, &h));
  const uint8_t type15[] = {0xF0, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_fixed_header(type15, 2, &h));
  const uint8_t subscribe_flags[] = {0x80, 0x00};
  ASSERT_ERR(Err::Malformed, mqtt::decode_fixed_header(subscribe_flags, 2, &h));
  const uint8_t pubrel[] = {0x62, 0x02};
  ASSERT_OK(mqtt::decode_fixed_header(pubrel, 2, &h));
}

// ------------------------------------------------------------ payload
static const char kWorstV1[] = "{\"d\":\"v1\",\"n\":199,\"t\":1234567890123456,\"s\":[1,4095,4095,9999]}";

static void test_payload_minimum_is_worst_case_length(void) {
  TEST_ASSERT_EQUAL_INT(strlen(kWorstV1), payload_min_size("v1", 200));
  TEST_ASSERT_EQUAL_INT(strlen(kWorstV1) - 2, payload_min_size("v1", 10));  // seq 9: one digit
  ErrorText err;
  ASSERT_ERR(Err::PayloadTooSmall, payload_check_size("v1", 200, strlen(kWorstV1) - 1, &err));
  char expect[32];
  snprintf(expect, sizeof(expect), "minimum of %u bytes", static_cast<unsigned>(strlen(kWorstV1)));
  TEST_ASSERT_NOT_NULL(strstr(err.c_str(), expect));
  ASSERT_OK(payload_check_size("v1", 200, 65, &err));
  ASSERT_ERR(Err::PayloadTooLarge, payload_check_size("v1", 200, kMaxPayload + 1, &err));
  ASSERT_ERR(Err::InvalidArgument, payload_check_size("bad\"id", 200, 100, &err));
}

// Checks the exact structure: the body, then either spaces or the filler field, then '}'.
static void check_payload(const char* out, size_t size, const char* body) {
  size_t body_len = strlen(body);
  TEST_ASSERT_EQUAL_INT(size, strlen(out));
  TEST_ASSERT_EQUAL_MEMORY(body, out, body_len);
  TEST_ASSERT_TRUE(out[size - 1] == '}');
  size_t pad = size - body_len - 1;
  const char* tail = out + body_len;
  if (pad == 0) return;
  if (pad < 7) {
    for (size_t i = 0; i < pad; ++i) TEST_ASSERT_TRUE(tail[i] == ' ');
    return;
  }
  TEST_ASSERT_EQUAL_MEMORY(",\"x\":\"", tail, 6);
  for (size_t i = 6; i < pad - 1; ++i) TEST_ASSERT_TRUE(tail[i] == 'x');
  TEST_ASSERT_TRUE(tail[pad - 1] == '"');
}

static void test_payload_exact_size_every_p_to_1024(void) {
  const size_t min = payload_min_size("v1", 200);
  static char out[kMaxPayload + 1];
  SensorReading worst;
  worst.flame_digital = 1;
  worst.flame_analog = 4095;
  worst.mq2_analog = 4095;
  worst.mq2_ppm = 9999;
  SensorReading small;
  small.flame_digital = 0;
  small.flame_analog = 7;
  small.mq2_analog = 12;
  small.mq2_ppm = 3;
  ErrorText err;
  for (size_t p = min; p <= 1024; ++p) {
    ASSERT_OK(payload_encode("v1", 199, 1234567890123456LL, worst, p, out, sizeof(out), &err));
    check_payload(out, p, "{\"d\":\"v1\",\"n\":199,\"t\":1234567890123456,\"s\":[1,4095,4095,9999]");
    ASSERT_OK(payload_encode("v1", 0, 1764470000123456LL, small, p, out, sizeof(out), &err));
    check_payload(out, p, "{\"d\":\"v1\",\"n\":0,\"t\":1764470000123456,\"s\":[0,7,12,3]");
  }
  ASSERT_OK(payload_encode("v1", 5, 1, small, kMaxPayload, out, sizeof(out), &err));
  TEST_ASSERT_EQUAL_INT(kMaxPayload, strlen(out));
}

static void test_payload_study_sizes(void) {
  static char out[kMaxPayload + 1];
  SensorReading r;
  r.flame_digital = 0;
  r.flame_analog = 4001;
  r.mq2_analog = 650;
  r.mq2_ppm = 312;
  ErrorText err;
  ASSERT_OK(payload_encode("v1", 42, 1764470000123456LL, r, 65, out, sizeof(out), &err));
  // 59 bytes of body + closing brace: 6 bytes of padding, too few for the filler field -> spaces.
  TEST_ASSERT_EQUAL_STRING("{\"d\":\"v1\",\"n\":42,\"t\":1764470000123456,\"s\":[0,4001,650,312]      }", out);
  ASSERT_OK(payload_encode("v1", 1, 1764470000123456LL, r, 65, out, sizeof(out), &err));
  // seq 1: 58 + 1 bytes, 7 bytes of padding: an empty filler field.
  TEST_ASSERT_EQUAL_STRING("{\"d\":\"v1\",\"n\":1,\"t\":1764470000123456,\"s\":[0,4001,650,312],\"x\":\"\"}", out);
  ASSERT_OK(payload_encode("v1", 42, 1764470000123456LL, r, 100, out, sizeof(out), &err));
  TEST_ASSERT_EQUAL_INT(100, strlen(out));
}

static void test_payload_refuses_bad_input(void) {
  static char out[kMaxPayload + 1];
  SensorReading r;
  ErrorText err;
  ASSERT_ERR(Err::PayloadTooSmall, payload_encode("v1", 0, 1, r, 20, out, sizeof(out), &err));
  ASSERT_ERR(Err::InvalidArgument, payload_encode("v1", 0, -1, r, 100, out, sizeof(out), &err));
  ASSERT_ERR(Err::InvalidArgument, payload_encode("v1", 0, kMaxTimestampUs + 1, r, 100, out, sizeof(out), &err));
  r.mq2_ppm = 10000;
  ASSERT_ERR(Err::InvalidArgument, payload_encode("v1", 0, 1, r, 100, out, sizeof(out), &err));
  r.mq2_ppm = 0;
  r.flame_digital = 2;
  ASSERT_ERR(Err::InvalidArgument, payload_encode("v1", 0, 1, r, 100, out, sizeof(out), &err));
  r.flame_digital = 0;
  ASSERT_ERR(Err::BufferTooSmall, payload_encode("v1", 0, 1, r, 100, out, 100, &err));
}

// ------------------------------------------------------------ cipher suites
static void test_cipher_list_parsing(void) {
  uint16_t ids[kMaxCiphers];
  size_t n = 0;
  ErrorText err;
  ASSERT_OK(parse_cipher_list("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", ids, kMaxCiphers, &n, &err));
  TEST_ASSERT_EQUAL_INT(1, n);
  TEST_ASSERT_EQUAL_HEX16(0xCCA9, ids[0]);
  ASSERT_OK(parse_cipher_list(" TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 , TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                              ids, kMaxCiphers, &n, &err));
  TEST_ASSERT_EQUAL_INT(2, n);
  TEST_ASSERT_EQUAL_HEX16(0xCCA8, ids[0]);
  TEST_ASSERT_EQUAL_HEX16(0xC02B, ids[1]);
  ASSERT_ERR(Err::UnknownCipher, parse_cipher_list("ECDHE-ECDSA-CHACHA20-POLY1305", ids, kMaxCiphers, &n, &err));
  TEST_ASSERT_NOT_NULL(strstr(err.c_str(), "ECDHE-ECDSA-CHACHA20-POLY1305"));
  ASSERT_ERR(Err::InvalidArgument, parse_cipher_list("", ids, kMaxCiphers, &n, &err));
  ASSERT_ERR(Err::InvalidArgument,
             parse_cipher_list("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,", ids, kMaxCiphers, &n, &err));
  TEST_ASSERT_TRUE(cipher_is_chachapoly(0xCCA9));
  TEST_ASSERT_FALSE(cipher_is_chachapoly(0xC02B));
}

// Ground truth: mbedTLS's own name for each code point is the IANA name with '-' for '_'.
static void test_cipher_table_matches_mbedtls(void) {
  const uint16_t ids[] = {0xCCA9, 0xCCA8, 0xCCAA, 0xC02B, 0xC02C, 0xC02F, 0xC030, 0x009C, 0xC023, 0xC0AC};
  for (uint16_t id : ids) {
    const char* iana = cipher_iana_name(id);
    TEST_ASSERT_NOT_NULL(iana);
    const char* mbed = mbedtls_ssl_get_ciphersuite_name(id);
    TEST_ASSERT_NOT_NULL(mbed);
    char converted[80];
    snprintf(converted, sizeof(converted), "%s", iana);
    for (char* p = converted; *p; ++p) {
      if (*p == '_') *p = '-';
    }
    TEST_ASSERT_EQUAL_STRING(mbed, converted);
  }
}

// ------------------------------------------------------------ MQ-2 arithmetic
static void test_mq2_round_trip_and_clean_air(void) {
  Mq2Params p;
  double rs = mq2_rs_ohm(1000, p);
  TEST_ASSERT_TRUE(rs > 0.0);
  uint16_t back = mq2_adc_for_rs(rs, p);
  TEST_ASSERT_TRUE(back >= 999 && back <= 1001);
  double r0 = mq2_r0_from_clean_air(rs, p);
  // Clean air (Rs/R0 = 9.83) is far below the 200 ppm end of the curve; Rs/R0 = 1.70 is 200 ppm.
  TEST_ASSERT_TRUE(mq2_ppm(rs, r0) < 50);
  uint16_t ppm200 = mq2_ppm(1.70 * r0, r0);
  TEST_ASSERT_TRUE(ppm200 >= 199 && ppm200 <= 201);
  TEST_ASSERT_EQUAL_INT(9999, mq2_ppm(0.001 * r0, r0));
  TEST_ASSERT_EQUAL_INT(9999, mq2_ppm(-1.0, r0));
}

// ------------------------------------------------------------ publisher with a scripted transport
class FakeClock : public Clock {
 public:
  int64_t mono = 1000000;
  int64_t wall_offset = 1764470000000000LL;
  int64_t cost_us = 37;  // every clock read costs time: the schedule must not drift anyway
  int64_t sleeps[8] = {0};
  int n_sleeps = 0;
  int64_t mono_us() override { return mono += cost_us; }
  int64_t wall_us() override { return mono + wall_offset; }
  void sleep_until_mono_us(int64_t t) override {
    if (n_sleeps < 8) sleeps[n_sleeps] = t;
    ++n_sleeps;
    if (t > mono) mono = t;
  }
};

class FakeTransport : public Transport {
 public:
  uint8_t in[64];
  size_t in_len = 0, in_pos = 0;
  uint8_t out[4096];
  size_t out_len = 0;
  bool closed = false;
  bool broker_never_closes = false;  // after the scripted input: time out instead of EOF
  TransportStats st;
  Err open(const char*, uint16_t, uint32_t) override { return Err::Ok; }
  Err write_all(const uint8_t* d, size_t n) override {
    memcpy(out + out_len, d, n);
    out_len += n;
    return Err::Ok;
  }
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t) override {
    if (in_pos >= in_len) return broker_never_closes ? Err::RecvTimeout : Err::PeerClosed;
    *got = (in_len - in_pos) < cap ? (in_len - in_pos) : cap;
    memcpy(buf, in + in_pos, *got);
    in_pos += *got;
    return Err::Ok;
  }
  void close() override { closed = true; }
  const char* error_text() const override { return "fake"; }
  const TransportStats& stats() const override { return st; }
};

class FixedSensors : public SensorSource {
 public:
  Err read(uint32_t, SensorReading* out) override {
    out->flame_digital = 0;
    out->flame_analog = 4000;
    out->mq2_analog = 600;
    out->mq2_ppm = 300;
    return Err::Ok;
  }
};

class Recorder : public SendObserver {
 public:
  int64_t t[8] = {0};
  int64_t puback[8] = {0};
  size_t mqtt_bytes = 0;
  int n = 0;
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t, size_t mqtt, int64_t puback_us) override {
    if (seq < 8) t[seq] = t_send_us;
    if (seq < 8) puback[seq] = puback_us;
    mqtt_bytes = mqtt;
    ++n;
    return true;
  }
};

static void test_publisher_schedule_and_packets(void) {
  FakeTransport tr;
  const uint8_t connack[] = {0x20, 0x02, 0x00, 0x00};
  memcpy(tr.in, connack, 4);
  tr.in_len = 4;
  FakeClock clk;
  FixedSensors sensors;
  Recorder rec;
  Publisher publisher(tr, clk, sensors, rec);
  Publisher* pub = &publisher;
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  cfg.host = "broker";
  cfg.samples = 5;
  cfg.interval_us = 100000;
  cfg.payload_size = 65;
  RunStats stats;
  ASSERT_OK(pub->run(cfg, &stats));
  TEST_ASSERT_EQUAL_INT(5, stats.messages_sent);
  TEST_ASSERT_EQUAL_INT(5, rec.n);
  for (int i = 0; i < 5; ++i) TEST_ASSERT_EQUAL_INT(-1, rec.puback[i]);  // QoS 0: no PUBACK
  // Absolute schedule: the sleep targets are t0 + i * interval exactly.
  TEST_ASSERT_TRUE(clk.n_sleeps >= 4);
  for (int i = 1; i < 4; ++i) TEST_ASSERT_EQUAL_INT(100000, clk.sleeps[i] - clk.sleeps[i - 1]);
  // CONNECT (16) + 5 x PUBLISH (2 + 2 + 15 + 65 = 84) + DISCONNECT (2)
  TEST_ASSERT_EQUAL_INT(84, rec.mqtt_bytes);
  TEST_ASSERT_EQUAL_INT(16 + 5 * 84 + 2, tr.out_len);
  TEST_ASSERT_EQUAL_INT(0x10, tr.out[0]);
  TEST_ASSERT_EQUAL_INT(0x30, tr.out[16]);
  TEST_ASSERT_EQUAL_INT(0xE0, tr.out[tr.out_len - 2]);
  TEST_ASSERT_TRUE(tr.closed);
}

// After DISCONNECT the publisher waits for the broker to close the connection (every message has
// then arrived); a broker that never closes is an error that says the last messages may be lost.
static void test_publisher_waits_for_broker_close_after_disconnect(void) {
  FakeTransport tr;
  const uint8_t connack[] = {0x20, 0x02, 0x00, 0x00};
  memcpy(tr.in, connack, 4);
  tr.in_len = 4;
  tr.broker_never_closes = true;
  FakeClock clk;
  FixedSensors sensors;
  Recorder rec;
  Publisher publisher(tr, clk, sensors, rec);
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  cfg.host = "broker";
  cfg.samples = 2;
  cfg.drain_timeout_ms = 5;
  RunStats stats;
  ASSERT_ERR(Err::RecvTimeout, publisher.run(cfg, &stats));
  TEST_ASSERT_EQUAL_INT(2, stats.messages_sent);
  TEST_ASSERT_EQUAL_INT(0xE0, tr.out[tr.out_len - 2]);  // DISCONNECT was sent
  TEST_ASSERT_NOT_NULL(strstr(publisher.error_text(), "did not close the connection"));
  TEST_ASSERT_TRUE(tr.closed);
}

static void test_publisher_qos1_waits_for_matching_puback(void) {
  FakeTransport tr;
  const uint8_t script[] = {0x20, 0x02, 0x00, 0x00, 0x40, 0x02, 0x00, 0x01, 0x40, 0x02, 0x00, 0x07};
  memcpy(tr.in, script, sizeof(script));
  tr.in_len = sizeof(script);
  FakeClock clk;
  FixedSensors sensors;
  Recorder rec;
  Publisher publisher(tr, clk, sensors, rec);
  Publisher* pub = &publisher;
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  cfg.host = "broker";
  cfg.samples = 2;
  cfg.qos = 1;
  RunStats stats;
  ASSERT_ERR(Err::AckMismatch, pub->run(cfg, &stats));
  TEST_ASSERT_EQUAL_INT(2, stats.messages_sent);
  TEST_ASSERT_NOT_NULL(strstr(pub->error_text(), "expected 2"));
  // Both PUBLISH are reported (after their PUBACK wait); the round trip is mono before write_all ->
  // mono after the PUBACK: three clock reads of 37 us apart here (last_tx, the ack deadline, the end).
  TEST_ASSERT_EQUAL_INT(2, rec.n);
  TEST_ASSERT_EQUAL_INT(3 * clk.cost_us, rec.puback[0]);
  TEST_ASSERT_EQUAL_INT(-1, rec.puback[1]);  // the wrong PUBACK is no round trip
}

static void test_publisher_connack_refused(void) {
  FakeTransport tr;
  const uint8_t connack[] = {0x20, 0x02, 0x00, 0x04};
  memcpy(tr.in, connack, 4);
  tr.in_len = 4;
  FakeClock clk;
  FixedSensors sensors;
  Recorder rec;
  Publisher publisher(tr, clk, sensors, rec);
  Publisher* pub = &publisher;
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  cfg.host = "broker";
  RunStats stats;
  ASSERT_ERR(Err::ConnackRefused, pub->run(cfg, &stats));
  TEST_ASSERT_NOT_NULL(strstr(pub->error_text(), "bad user name or password"));
  TEST_ASSERT_EQUAL_INT(0, rec.n);
}

static void test_publisher_refuses_small_payload_before_connecting(void) {
  FakeTransport tr;
  FakeClock clk;
  FixedSensors sensors;
  Recorder rec;
  Publisher publisher(tr, clk, sensors, rec);
  Publisher* pub = &publisher;
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  cfg.host = "broker";
  cfg.payload_size = 40;
  RunStats stats;
  ASSERT_ERR(Err::PayloadTooSmall, pub->run(cfg, &stats));
  TEST_ASSERT_NOT_NULL(strstr(pub->error_text(), "minimum of 62 bytes"));
  TEST_ASSERT_EQUAL_INT(0, tr.out_len);
}

class StoppingClock : public FakeClock {
 public:
  volatile sig_atomic_t* flag = nullptr;
  void sleep_until_mono_us(int64_t t) override {
    FakeClock::sleep_until_mono_us(t);
    if (n_sleeps == 2) *flag = 1;  // a signal arrives during the second wait
  }
};

static void test_publisher_stops_on_flag_and_names_count(void) {
  FakeTransport tr;
  const uint8_t connack[] = {0x20, 0x02, 0x00, 0x00};
  memcpy(tr.in, connack, 4);
  tr.in_len = 4;
  static volatile sig_atomic_t stop = 0;
  stop = 0;
  StoppingClock clk;
  clk.flag = &stop;
  FixedSensors sensors;
  Recorder rec;
  Publisher publisher(tr, clk, sensors, rec);
  publisher.set_stop_flag(&stop);
  PublishConfig cfg{DeviceConfig()};  // device_options.def's defaults
  cfg.host = "broker";
  cfg.samples = 10;
  cfg.interval_us = 100000;
  RunStats stats;
  ASSERT_ERR(Err::Interrupted, publisher.run(cfg, &stats));
  TEST_ASSERT_EQUAL_INT(2, stats.messages_sent);
  TEST_ASSERT_NOT_NULL(strstr(publisher.error_text(), "after 2 of 10 messages"));
  TEST_ASSERT_TRUE(tr.closed);
}

int main(int, char**) {
  UNITY_BEGIN();
  RUN_TEST(test_remaining_length_table_2_4);
  RUN_TEST(test_remaining_length_malformed_and_truncated);
  RUN_TEST(test_connect_minimal_clean_session);
  RUN_TEST(test_connect_with_username_password);
  RUN_TEST(test_connect_refuses_what_the_spec_forbids);
  RUN_TEST(test_decode_connect_rejects_malformed);
  RUN_TEST(test_publish_qos0);
  RUN_TEST(test_publish_qos1_retain_dup);
  RUN_TEST(test_publish_two_byte_remaining_length);
  RUN_TEST(test_publish_refuses_invalid);
  RUN_TEST(test_decode_publish_rejects_malformed);
  RUN_TEST(test_small_packets_exact_bytes);
  RUN_TEST(test_decode_connack);
  RUN_TEST(test_decode_puback_pingresp);
  RUN_TEST(test_payload_minimum_is_worst_case_length);
  RUN_TEST(test_payload_exact_size_every_p_to_1024);
  RUN_TEST(test_payload_study_sizes);
  RUN_TEST(test_payload_refuses_bad_input);
  RUN_TEST(test_cipher_list_parsing);
  RUN_TEST(test_cipher_table_matches_mbedtls);
  RUN_TEST(test_mq2_round_trip_and_clean_air);
  RUN_TEST(test_publisher_schedule_and_packets);
  RUN_TEST(test_publisher_waits_for_broker_close_after_disconnect);
  RUN_TEST(test_publisher_qos1_waits_for_matching_puback);
  RUN_TEST(test_publisher_connack_refused);
  RUN_TEST(test_publisher_refuses_small_payload_before_connecting);
  RUN_TEST(test_publisher_stops_on_flag_and_names_count);
  return UNITY_END();
}
