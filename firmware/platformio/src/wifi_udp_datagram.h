// tb::Datagram over Arduino-ESP32's WiFiUDP: the board side of the clock exchanges
// (lib/testbed_core/src/time_sync.h). Board code, so it lives in src/, not in the portable core.
//
//   WifiUdpDatagram udp;
//   tb::TimeSample samples[16];
//   uint32_t got = 0;
//   tb::Err e = tb::time_sync(udp, clock, TESTBED_BROKER_HOST, port, 16, samples, &got);
//
// The host name is resolved once, in open(), so no DNS lookup sits between t1 and the datagram
// leaving. recv() polls without sleeping for the first kSpinUs (a WiFi round trip is 2-5 ms; a
// 1 ms sleep would add up to 1 ms to the stamped t4 and so to the bound), then yields 1 ms per poll.
#pragma once

#include <Arduino.h>
#include <WiFiUdp.h>
#include <esp_timer.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "time_sync.h"

class WifiUdpDatagram : public tb::Datagram {
 public:
  static constexpr int64_t kSpinUs = 20000;

  WifiUdpDatagram() = default;
  ~WifiUdpDatagram() override { close(); }
  WifiUdpDatagram(const WifiUdpDatagram&) = delete;
  WifiUdpDatagram& operator=(const WifiUdpDatagram&) = delete;

  // Resolves host (IPv4, lwIP's getaddrinfo as in the core's PlainTcp) and binds the local UDP port
  // `port` (the server's own number, as NTP does with 123).
  tb::Err open(const char* host, uint16_t port) override {
    close();
    if (host == nullptr || host[0] == '\0') return tb::Err::InvalidArgument;
    addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host, nullptr, &hints, &res) != 0 || res == nullptr) {
      if (res != nullptr) freeaddrinfo(res);
      return tb::Err::Dns;
    }
    const uint32_t addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;  // network order
    freeaddrinfo(res);
    server_ = IPAddress(addr);
    port_ = port;
    if (udp_.begin(port) != 1) return tb::Err::Socket;
    open_ = true;
    return tb::Err::Ok;
  }

  tb::Err send(const uint8_t* data, size_t len) override {
    if (!open_) return tb::Err::NotConnected;
    if (udp_.beginPacket(server_, port_) != 1) return tb::Err::Send;
    if (udp_.write(data, len) != len) return tb::Err::Send;
    return udp_.endPacket() == 1 ? tb::Err::Ok : tb::Err::Send;
  }

  tb::Err recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) override {
    *len = 0;
    if (!open_) return tb::Err::NotConnected;
    const int64_t start = esp_timer_get_time();
    const int64_t deadline = start + static_cast<int64_t>(timeout_ms) * 1000;
    while (true) {
      if (udp_.parsePacket() > 0) {
        const int got = udp_.read(buf, cap);
        udp_.flush();  // the rest of a longer datagram: parsePacket() sees nothing new until it is gone
        *len = got > 0 ? static_cast<size_t>(got) : 0;
        return tb::Err::Ok;
      }
      const int64_t now = esp_timer_get_time();
      if (now >= deadline) return tb::Err::RecvTimeout;
      if (now - start >= kSpinUs) delay(1);
    }
  }

  void close() override {
    if (open_) udp_.stop();
    open_ = false;
  }

 private:
  WiFiUDP udp_;
  IPAddress server_;
  uint16_t port_ = 0;
  bool open_ = false;
};
