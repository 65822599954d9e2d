// The host stand-in for Arduino's Client (and WiFiClientSecure): a tb::ByteClient over one of the core's
// own transports - PlainTcp (POSIX sockets) or TlsTransport (POSIX sockets + mbedTLS, the "secure
// client"). With it, the core's ClientTransport (lib/testbed_core/src/client_transport.h), the path the
// ESP32's WiFiClientSecure env takes, runs end to end on the host against a real broker.
// Client semantics as Arduino-ESP32's WiFiClient(Secure): available() does not block (here: at most 1 ms),
// read() returns -1 when nothing is buffered, connected() stays true while unread bytes remain.
#pragma once

#include <cstddef>
#include <cstdint>

#include "client_transport.h"
#include "transport.h"

namespace vdev {

class TransportByteClient : public tb::ByteClient {
 public:
  TransportByteClient(tb::Transport& inner, bool secure) : inner_(inner), secure_(secure) {}
  int connect(const char* host, uint16_t port, uint32_t timeout_ms) override;
  size_t write(const uint8_t* data, size_t len) override;
  int available() override;
  int read(uint8_t* buf, size_t len) override;
  void stop() override;
  bool connected() override;
  bool secure() const override { return secure_; }
  void describe(tb::TransportStats* stats) const override;
  const char* last_error() const override { return inner_.error_text(); }

 private:
  tb::Transport& inner_;
  bool secure_;
  bool open_ = false;
  bool peer_closed_ = false;
  uint8_t rx_[512];
  size_t rx_len_ = 0;
  size_t rx_off_ = 0;
};

}  // namespace vdev
