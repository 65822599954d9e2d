#include "pty_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace vdev {
namespace {

constexpr int kWriteTimeoutMs = 2000;  // a host that reads nothing for this long loses output

int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

bool PtyStream::open(std::string* error) {
  fd_ = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0 || grantpt(fd_) != 0 || unlockpt(fd_) != 0) {
    *error = std::string("cannot create a pseudo-terminal: ") + strerror(errno);
    return false;
  }
  const char* name = ptsname(fd_);
  if (name == nullptr) {
    *error = std::string("ptsname failed: ") + strerror(errno);
    return false;
  }
  slave_ = name;
  termios t;
  if (tcgetattr(fd_, &t) != 0) {
    *error = std::string("tcgetattr on the pty failed: ") + strerror(errno);
    return false;
  }
  cfmakeraw(&t);  // no echo, no line editing, no CR/LF translation: bytes as a UART carries them
  cfsetispeed(&t, B115200);
  cfsetospeed(&t, B115200);
  if (tcsetattr(fd_, TCSANOW, &t) != 0 || fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK) != 0) {
    *error = std::string("cannot set the pty to raw, non-blocking: ") + strerror(errno);
    return false;
  }
  // Open and close the slave once: from then on the master sees a hang-up until the host opens it,
  // which is how a connecting host is noticed.
  int s = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s >= 0) ::close(s);
  ring_.assign(rx_cap_, 0);
  connected_ = false;
  return true;
}

void PtyStream::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void PtyStream::update_connection() {
  if (fd_ < 0) return;
  pollfd p{fd_, 0, 0};
  poll(&p, 1, 0);
  bool now = (p.revents & POLLHUP) == 0;
  if (now && !connected_) {
    fprintf(stderr, "board-emu: host opened %s\n", slave_.c_str());
    if (reset_on_open_) reset_pending_ = true;
  } else if (!now && connected_) {
    fprintf(stderr, "board-emu: host closed %s\n", slave_.c_str());
  }
  connected_ = now;
}

bool PtyStream::host_connected() {
  update_connection();
  return connected_;
}

void PtyStream::wait_host(uint32_t timeout_ms) {
  const int64_t deadline = now_ms() + timeout_ms;
  while (!host_connected() && now_ms() < deadline) sleep_ms(10);
}

void PtyStream::drain() {
  uint8_t tmp[512];
  uint64_t lost = 0;
  while (fd_ >= 0) {
    ssize_t n = ::read(fd_, tmp, sizeof(tmp));
    if (n <= 0) break;  // EAGAIN (nothing more), EIO (no host)
    for (ssize_t i = 0; i < n; ++i) {
      if (ring_size_ == rx_cap_) {
        ++lost;
        continue;
      }
      ring_[(ring_head_ + ring_size_) % rx_cap_] = tmp[i];
      ++ring_size_;
    }
  }
  if (lost > 0) {
    dropped_ += lost;
    fprintf(stderr, "board-emu: receive buffer (%zu bytes) full: dropped %llu bytes (%llu in all)\n", rx_cap_,
            static_cast<unsigned long long>(lost), static_cast<unsigned long long>(dropped_));
  }
}

void PtyStream::pop(uint8_t* buf, size_t cap, size_t* got) {
  size_t n = 0;
  while (n < cap && ring_size_ > 0) {
    buf[n++] = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % rx_cap_;
    --ring_size_;
  }
  *got = n;
}

tb::Err PtyStream::read(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  *got = 0;
  if (fd_ < 0) return tb::Err::PeerClosed;
  const int64_t deadline = now_ms() + timeout_ms;
  while (true) {
    update_connection();
    if (reset_pending_) return tb::Err::RecvTimeout;
    drain();
    if (ring_size_ > 0) {
      pop(buf, cap, got);
      return tb::Err::Ok;
    }
    int64_t left = deadline - now_ms();
    if (left <= 0) return tb::Err::RecvTimeout;
    if (!connected_) {
      sleep_ms(left < 20 ? static_cast<int>(left) : 20);  // a hung-up master polls readable at once
      continue;
    }
    pollfd p{fd_, POLLIN, 0};
    poll(&p, 1, static_cast<int>(left < 100 ? left : 100));
  }
}

tb::Err PtyStream::write(const uint8_t* data, size_t len) {
  if (fd_ < 0) return tb::Err::PeerClosed;
  update_connection();
  for (size_t i = 0; i < len; ++i) {
    if (data[i] != '\n') {
      out_line_.push_back(static_cast<char>(data[i]));
      continue;
    }
    std::string complete;
    complete.swap(out_line_);
    if (reset_pending_ || !connected_) continue;  // muted: nobody listens, or the board is resetting
    complete.push_back('\n');
    size_t done = 0;
    const int64_t deadline = now_ms() + kWriteTimeoutMs;
    while (done < complete.size() && now_ms() < deadline) {
      ssize_t n = ::write(fd_, complete.data() + done, complete.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
      pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, 50);
    }
    complete.pop_back();
    if (on_line_) on_line_(complete);
  }
  return tb::Err::Ok;
}

void PtyStream::reset_done() {
  ring_head_ = ring_size_ = 0;
  out_line_.clear();
  if (fd_ >= 0) {
    tcflush(fd_, TCIOFLUSH);
    drain();  // what the kernel still held
    ring_head_ = ring_size_ = 0;
  }
  reset_pending_ = false;
}

}  // namespace vdev
