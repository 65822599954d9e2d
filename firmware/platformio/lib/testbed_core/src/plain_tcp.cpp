#include "plain_tcp.h"

#include "resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace tb {
namespace {

constexpr int64_t kRetryUs = 200000;

#if defined(MSG_NOSIGNAL)
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;
#endif

bool set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return false;
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  return fcntl(fd, F_SETFL, flags) == 0;
}

}  // namespace

Err PlainTcp::connect_once(const void* addr, unsigned addrlen, int64_t deadline_us, int* os_error) {
  *os_error = 0;
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) {
    err_.set("socket() failed: %s", strerror(errno));
    return Err::Socket;
  }
  if (!set_nonblocking(fd_, true)) {
    err_.set("fcntl(O_NONBLOCK) failed: %s", strerror(errno));
    return Err::Socket;
  }
  int64_t start = clock_.mono_us();
  int rc = ::connect(fd_, static_cast<const sockaddr*>(addr), static_cast<socklen_t>(addrlen));
  if (rc != 0 && errno != EINPROGRESS) {
    *os_error = errno;
    return Err::Connect;
  }
  if (rc != 0) {
    int64_t left_us = deadline_us - clock_.mono_us();
    if (left_us < 0) left_us = 0;
    fd_set wfds;
    FD_ZERO(&wfds);
    FD_SET(fd_, &wfds);
    timeval tv;
    tv.tv_sec = static_cast<long>(left_us / 1000000);
    tv.tv_usec = static_cast<long>(left_us % 1000000);
    int n = select(fd_ + 1, nullptr, &wfds, nullptr, &tv);
    if (n == 0) return Err::ConnectTimeout;
    if (n < 0) {
      *os_error = errno;
      return Err::Connect;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
      *os_error = errno;
      return Err::Connect;
    }
    if (so_error != 0) {
      *os_error = so_error;
      return Err::Connect;
    }
  }
  stats_.tcp_connect_us = clock_.mono_us() - start;
  if (!set_nonblocking(fd_, false)) {
    err_.set("fcntl(blocking) failed: %s", strerror(errno));
    return Err::Socket;
  }
  if (nodelay_) {
    int one = 1;
    if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
      err_.set("setsockopt(TCP_NODELAY) failed: %s", strerror(errno));
      return Err::Socket;
    }
  }
  return Err::Ok;
}

Err PlainTcp::open(const char* host, uint16_t port, uint32_t timeout_ms) {
  close();
  err_.clear();
  stats_ = TransportStats();
  int rc = 0;
  addrinfo* res = resolve_ipv4(host, port, SOCK_STREAM, &rc);
  if (res == nullptr) {
    err_.set("cannot resolve broker host \"%s\" (getaddrinfo error %d)", host, rc);
    return Err::Dns;
  }
  int64_t deadline = clock_.mono_us() + static_cast<int64_t>(timeout_ms) * 1000;
  Err result = Err::Connect;
  while (true) {
    int os_error = 0;
    result = connect_once(res->ai_addr, static_cast<unsigned>(res->ai_addrlen), deadline, &os_error);
    if (result == Err::Ok) break;
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (result == Err::Connect && os_error == ECONNREFUSED) result = Err::ConnectRefused;
    bool retry = (result == Err::ConnectRefused) && clock_.mono_us() + kRetryUs < deadline;
    if (!retry) {
      if (result == Err::ConnectTimeout) {
        err_.set("TCP connect to %s:%u timed out after %u ms", host, static_cast<unsigned>(port),
                 static_cast<unsigned>(timeout_ms));
      } else if (result != Err::Socket) {
        err_.set("TCP connect to %s:%u failed: %s", host, static_cast<unsigned>(port), strerror(os_error));
      }
      break;
    }
    clock_.sleep_until_mono_us(clock_.mono_us() + kRetryUs);
  }
  freeaddrinfo(res);
  return result;
}

Err PlainTcp::write_all(const uint8_t* data, size_t len) {
  if (fd_ < 0) {
    err_.set("write on a closed connection");
    return Err::NotConnected;
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::send(fd_, data + done, len - done, kSendFlags);
    if (n < 0) {
      if (errno == EINTR) continue;
      err_.set("send() failed: %s", strerror(errno));
      return (errno == EPIPE || errno == ECONNRESET) ? Err::PeerClosed : Err::Send;
    }
    done += static_cast<size_t>(n);
  }
  return Err::Ok;
}

Err PlainTcp::wait_readable(uint32_t timeout_ms) {
  while (true) {
    fd_set rfds;
    FD_ZERO(&rfds);
    FD_SET(fd_, &rfds);
    timeval tv;
    tv.tv_sec = static_cast<long>(timeout_ms / 1000);
    tv.tv_usec = static_cast<long>((timeout_ms % 1000) * 1000);
    int n = select(fd_ + 1, &rfds, nullptr, nullptr, &tv);
    if (n > 0) return Err::Ok;
    if (n == 0) {
      err_.set("no data from the broker within %u ms", static_cast<unsigned>(timeout_ms));
      return Err::RecvTimeout;
    }
    if (errno == EINTR) continue;
    err_.set("select() failed: %s", strerror(errno));
    return Err::Recv;
  }
}

Err PlainTcp::read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  *got = 0;
  if (fd_ < 0) {
    err_.set("read on a closed connection");
    return Err::NotConnected;
  }
  Err e = wait_readable(timeout_ms);
  if (e != Err::Ok) return e;
  while (true) {
    ssize_t n = ::recv(fd_, buf, cap, 0);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return Err::Ok;
    }
    if (n == 0) {
      err_.set("the broker closed the connection");
      return Err::PeerClosed;
    }
    if (errno == EINTR) continue;
    err_.set("recv() failed: %s", strerror(errno));
    return errno == ECONNRESET ? Err::PeerClosed : Err::Recv;
  }
}

void PlainTcp::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace tb
