// tb::Datagram over a connected POSIX UDP socket (the host side of time_sync).
#pragma once

#include "time_sync.h"

namespace vdev {

class PosixUdp : public tb::Datagram {
 public:
  PosixUdp() = default;
  ~PosixUdp() override { close(); }
  PosixUdp(const PosixUdp&) = delete;
  PosixUdp& operator=(const PosixUdp&) = delete;

  // Resolves host (IPv4) and connect()s, so only the server's datagrams are received.
  tb::Err open(const char* host, uint16_t port) override;
  tb::Err send(const uint8_t* data, size_t len) override;
  // Err::ConnectRefused when the host answered an earlier datagram with ICMP port unreachable.
  tb::Err recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) override;
  void close() override;
  const char* error_text() const { return err_.c_str(); }

 private:
  int fd_ = -1;
  tb::ErrorText err_;
};

}  // namespace vdev
