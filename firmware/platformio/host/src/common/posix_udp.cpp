#include "posix_udp.h"

#include "resolve.h"  // tb::resolve_ipv4

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace vdev {

tb::Err PosixUdp::open(const char* host, uint16_t port) {
  close();
  err_.clear();
  int rc = 0;
  addrinfo* res = tb::resolve_ipv4(host, port, SOCK_DGRAM, &rc);
  if (res == nullptr) {
    err_.set("cannot resolve time-echo host \"%s\" (getaddrinfo error %d)", host, rc);
    return tb::Err::Dns;
  }
  tb::Err result = tb::Err::Ok;
  fd_ = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd_ < 0) {
    err_.set("socket(SOCK_DGRAM) failed: %s", strerror(errno));
    result = tb::Err::Socket;
  } else if (::connect(fd_, res->ai_addr, res->ai_addrlen) != 0) {
    err_.set("connect() of the UDP socket to %s:%u failed: %s", host, static_cast<unsigned>(port), strerror(errno));
    result = tb::Err::Connect;
  }
  freeaddrinfo(res);
  if (result != tb::Err::Ok) close();
  return result;
}

tb::Err PosixUdp::send(const uint8_t* data, size_t len) {
  if (fd_ < 0) {
    err_.set("send on a closed UDP socket");
    return tb::Err::NotConnected;
  }
  while (true) {
    ssize_t n = ::send(fd_, data, len, 0);
    if (n == static_cast<ssize_t>(len)) return tb::Err::Ok;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNREFUSED) {
      err_.set("the time-echo host refused a datagram (ICMP port unreachable): is the service running?");
      return tb::Err::ConnectRefused;
    }
    err_.set("send() of a %zu-byte datagram failed: %s", len, n < 0 ? strerror(errno) : "short write");
    return tb::Err::Send;
  }
}

tb::Err PosixUdp::recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) {
  *len = 0;
  if (fd_ < 0) {
    err_.set("recv on a closed UDP socket");
    return tb::Err::NotConnected;
  }
  pollfd p;
  p.fd = fd_;
  p.events = POLLIN;
  p.revents = 0;
  int n = 0;
  do {
    n = poll(&p, 1, static_cast<int>(timeout_ms));
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    err_.set("no datagram within %u ms", static_cast<unsigned>(timeout_ms));
    return tb::Err::RecvTimeout;
  }
  if (n < 0) {
    err_.set("poll() failed: %s", strerror(errno));
    return tb::Err::Recv;
  }
  ssize_t got = 0;
  do {
    got = ::recv(fd_, buf, cap, 0);
  } while (got < 0 && errno == EINTR);
  if (got >= 0) {
    *len = static_cast<size_t>(got);
    return tb::Err::Ok;
  }
  if (errno == ECONNREFUSED) {
    err_.set("the time-echo host refused a datagram (ICMP port unreachable): is the service running?");
    return tb::Err::ConnectRefused;
  }
  err_.set("recv() failed: %s", strerror(errno));
  return tb::Err::Recv;
}

void PosixUdp::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace vdev
