#include "client_transport.h"

namespace tb {

Err ClientTransport::open(const char* host, uint16_t port, uint32_t timeout_ms) {
  close();
  err_.clear();
  stats_ = TransportStats();
  if (host == nullptr || host[0] == '\0') {
    err_.set("no broker host");
    return Err::InvalidArgument;
  }
  const int64_t start = clock_.mono_us();
  const int ok = client_.connect(host, port, timeout_ms);
  const int64_t took = clock_.mono_us() - start;
  if (ok != 1) {
    const char* why = client_.last_error();
    err_.set("connect to %s:%u failed after %lld ms%s%s", host, static_cast<unsigned>(port),
             static_cast<long long>(took / 1000), why[0] != '\0' ? ": " : "", why);
    client_.stop();
    return took >= static_cast<int64_t>(timeout_ms) * 1000 ? Err::ConnectTimeout : Err::Connect;
  }
  if (client_.secure()) {
    stats_.handshake_us = took;  // TCP connect + TLS handshake: one call, not separable
  } else {
    stats_.tcp_connect_us = took;
  }
  client_.describe(&stats_);
  open_ = true;
  return Err::Ok;
}

Err ClientTransport::write_all(const uint8_t* data, size_t len) {
  if (!open_) return Err::NotConnected;
  size_t done = 0;
  while (done < len) {
    const size_t n = client_.write(data + done, len - done);
    if (n == 0) {
      const char* why = client_.last_error();
      err_.set("write failed after %u of %u bytes%s%s", static_cast<unsigned>(done), static_cast<unsigned>(len),
               why[0] != '\0' ? ": " : "", why);
      return Err::Send;
    }
    done += n;
  }
  return Err::Ok;
}

Err ClientTransport::read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  *got = 0;
  if (!open_) return Err::NotConnected;
  const int64_t deadline = clock_.mono_us() + static_cast<int64_t>(timeout_ms) * 1000;
  while (true) {
    const int avail = client_.available();
    if (avail > 0) {
      const size_t want = static_cast<size_t>(avail) < cap ? static_cast<size_t>(avail) : cap;
      const int n = client_.read(buf, want);
      if (n > 0) {
        *got = static_cast<size_t>(n);
        return Err::Ok;
      }
    } else if (!client_.connected()) {
      err_.set("the broker closed the connection");
      return Err::PeerClosed;
    }
    const int64_t now = clock_.mono_us();
    if (now >= deadline) {
      err_.set("no data from the broker within %u ms", static_cast<unsigned>(timeout_ms));
      return Err::RecvTimeout;
    }
    const int64_t next = now + poll_us_;
    clock_.sleep_until_mono_us(next < deadline ? next : deadline);
  }
}

void ClientTransport::close() {
  if (open_) client_.stop();
  open_ = false;
}

}  // namespace tb
