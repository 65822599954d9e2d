// Plain TCP transport over BSD sockets (Linux or lwIP), TCP_NODELAY on by default.
#pragma once

#include "clock.h"
#include "transport.h"

namespace tb {

class PlainTcp : public Transport {
 public:
  explicit PlainTcp(Clock& clock, bool nodelay = true) : clock_(clock), nodelay_(nodelay) {}
  ~PlainTcp() override { close(); }
  PlainTcp(const PlainTcp&) = delete;
  PlainTcp& operator=(const PlainTcp&) = delete;

  // Connects; a refused connection is retried every 200 ms until timeout_ms has passed
  // (a broker container that is still starting).
  Err open(const char* host, uint16_t port, uint32_t timeout_ms) override;
  Err write_all(const uint8_t* data, size_t len) override;
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
  void close() override;
  const char* error_text() const override { return err_.c_str(); }
  const TransportStats& stats() const override { return stats_; }

  int fd() const { return fd_; }
  // Waits until the socket is readable: Ok, RecvTimeout or Recv.
  Err wait_readable(uint32_t timeout_ms);
  ErrorText& error() { return err_; }

 private:
  Err connect_once(const void* addr, unsigned addrlen, int64_t deadline_us, int* os_error);

  Clock& clock_;
  bool nodelay_;
  int fd_ = -1;
  ErrorText err_;
  TransportStats stats_;
};

}  // namespace tb
