// A Transport over any byte client with Arduino's Client semantics (connect / write / available / read /
// stop / connected), e.g. Arduino-ESP32's WiFiClientSecure through src/arduino_client_adapter.h, or a host
// stand-in (firmware/platformio/host/src/probes/transport_byte_client.h). The core includes no Arduino
// header: ByteClient is the core's own tiny interface, an adapter maps Arduino's Client onto it.
//
// What such a transport can report: a secure client does TCP connect and TLS handshake inside one
// connect() call, so only their sum is measured (stats().handshake_us, tcp_connect_us = -1); the TLS
// version and suite only when the client tells them (ByteClient::describe). It has no key log: a capture
// of its connection cannot be decrypted (record sizes and timing only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "clock.h"
#include "transport.h"

namespace tb {

class ByteClient {
 public:
  virtual ~ByteClient() = default;
  // Arduino's convention: 1 on success, 0 or negative on failure. Blocks at most timeout_ms.
  virtual int connect(const char* host, uint16_t port, uint32_t timeout_ms) = 0;
  // Bytes taken (0 on failure), as Client::write.
  virtual size_t write(const uint8_t* data, size_t len) = 0;
  // Bytes readable now without blocking, as Client::available.
  virtual int available() = 0;
  // Up to len bytes; -1 when none, as Client::read.
  virtual int read(uint8_t* buf, size_t len) = 0;
  virtual void stop() = 0;
  // False once the peer closed (and nothing is left to read) or the connection failed.
  virtual bool connected() = 0;
  // True when connect() also ran a TLS handshake (the transport then reports its time as handshake_us).
  virtual bool secure() const { return false; }
  // Fills what the client knows about the open connection (TLS version, suite); default: nothing.
  virtual void describe(TransportStats* stats) const { (void)stats; }
  // Why the last call failed, when the client can tell (e.g. mbedTLS's error text); "" otherwise.
  virtual const char* last_error() const { return ""; }
};

class ClientTransport : public Transport {
 public:
  // poll_us: the sleep between two available() polls while waiting for data.
  ClientTransport(ByteClient& client, Clock& clock, uint32_t poll_us = 1000)
      : client_(client), clock_(clock), poll_us_(poll_us) {}
  ~ClientTransport() override { close(); }
  ClientTransport(const ClientTransport&) = delete;
  ClientTransport& operator=(const ClientTransport&) = delete;

  Err open(const char* host, uint16_t port, uint32_t timeout_ms) override;
  Err write_all(const uint8_t* data, size_t len) override;
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
  // Client::stop(): a secure client sends its close_notify there; abort() is the same call (Arduino's
  // Client has no way to close without it).
  void close() override;
  const char* error_text() const override { return err_.c_str(); }
  const TransportStats& stats() const override { return stats_; }

 private:
  ByteClient& client_;
  Clock& clock_;
  uint32_t poll_us_;
  bool open_ = false;
  ErrorText err_;
  TransportStats stats_;
};

}  // namespace tb
