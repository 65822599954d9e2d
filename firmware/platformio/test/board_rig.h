// Shared by the host test executables that drive a BoardSession (test_protocol, test_connection):
// the RUN framing written out by hand, a scripted serial stream, a stepping clock, a fixed board, and
// a broker behind the session's TransportFilter hook.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "board_protocol.h"
#include "board_session.h"
#include "mqtt_codec.h"

// Unity assertion (the test includes unity.h first): the text holds the needle.
#define ASSERT_CONTAINS(haystack, needle) \
  TEST_ASSERT_TRUE_MESSAGE(strstr((haystack), (needle)) != nullptr, (std::string(haystack) + " lacks " + (needle)).c_str())

namespace tb_test {

using namespace tb;

inline std::string b64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += k[v & 63];
  }
  if (in.size() - i == 1) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (in.size() - i == 2) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

inline uint32_t crc_of(const std::string& s) { return proto::crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

// The host lines of one RUN: BEGIN, chunks of `chunk` body bytes, END.
inline std::vector<std::string> run_lines(const std::string& body, size_t chunk) {
  std::vector<std::string> out;
  char begin[64];
  snprintf(begin, sizeof(begin), "RUN BEGIN len=%zu crc=%08x", body.size(), static_cast<unsigned>(crc_of(body)));
  out.push_back(begin);
  for (size_t off = 0, i = 0; off < body.size(); off += chunk, ++i) {
    out.push_back("RUN CHUNK i=" + std::to_string(i) + " " + b64(body.substr(off, chunk)));
  }
  out.push_back("RUN END");
  return out;
}

inline void add_run(std::string* in, const std::string& body, size_t chunk = 174) {
  for (const std::string& l : run_lines(body, chunk)) *in += l + "\n";
}

class ScriptStream : public ByteStream {
 public:
  std::string in;
  size_t pos = 0;
  std::string out;
  bool closed_at_end = true;
  Err read(uint8_t* buf, size_t cap, size_t* got, uint32_t) override {
    *got = 0;
    if (pos >= in.size()) return closed_at_end ? Err::PeerClosed : Err::RecvTimeout;
    size_t n = in.size() - pos < cap ? in.size() - pos : cap;
    memcpy(buf, in.data() + pos, n);
    pos += n;
    *got = n;
    return Err::Ok;
  }
  Err write(const uint8_t* data, size_t len) override {
    out.append(reinterpret_cast<const char*>(data), len);
    return Err::Ok;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    size_t start = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == '\n') {
        v.push_back(out.substr(start, i - start));
        start = i + 1;
      }
    }
    return v;
  }
};

class StepClock : public Clock {
 public:
  int64_t t = 1000000;
  int64_t mono_us() override { return t += 10; }
  int64_t wall_us() override { return 1764470000000000LL + mono_us(); }
  void sleep_until_mono_us(int64_t target) override {
    if (target > t) t = target;
  }
};

class NoSensors : public SensorSource {
 public:
  Err read(uint32_t, SensorReading* out) override {
    *out = SensorReading();
    return Err::Ok;
  }
};

class FixedPort : public BoardPort {
 public:
  uint32_t free_heap() override { return 1000; }
  uint32_t min_free_heap() override { return 900; }
  int rssi() override { return -60; }
};

// A broker behind the session's TransportFilter hook: CONNACK, a PUBACK per QoS 1 PUBLISH, and the
// close after DISCONNECT.
class FakeBroker : public Transport, public TransportFilter {
 public:
  std::string rx;
  bool disconnected = false;
  int opens = 0, closes = 0, aborts = 0;
  SessionResumption resumption = SessionResumption::None;
  Transport* attach(Transport&) override { return this; }
  void detach() override {}
  Err open(const char*, uint16_t, uint32_t) override {
    ++opens;
    disconnected = false;
    rx.clear();
    return Err::Ok;
  }
  Err write_all(const uint8_t* data, size_t len) override {
    uint8_t out[8];
    size_t n = 0;
    mqtt::PublishView v;
    if (data[0] == 0x10) {
      mqtt::encode_connack(false, 0, out, sizeof(out), &n);
    } else if ((data[0] >> 4) == 3 && mqtt::decode_publish(data, len, &v) == Err::Ok && v.qos == 1) {
      mqtt::encode_puback(v.packet_id, out, sizeof(out), &n);
    } else if (data[0] == 0xE0) {
      disconnected = true;
    }
    rx.append(reinterpret_cast<const char*>(out), n);
    return Err::Ok;
  }
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t) override {
    *got = 0;
    if (rx.empty()) return disconnected ? Err::PeerClosed : Err::RecvTimeout;
    *got = rx.size() < cap ? rx.size() : cap;
    memcpy(buf, rx.data(), *got);
    rx.erase(0, *got);
    return Err::Ok;
  }
  void close() override { ++closes; }
  void abort() override { ++aborts; }
  void set_resumption(SessionResumption r) override { resumption = r; }
  const char* error_text() const override { return "fake broker"; }
  const TransportStats& stats() const override { return st; }
  TransportStats st;
};

}  // namespace tb_test
