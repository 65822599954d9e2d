#include "transport_byte_client.h"

#include <cstring>

namespace vdev {

int TransportByteClient::connect(const char* host, uint16_t port, uint32_t timeout_ms) {
  stop();
  peer_closed_ = false;
  rx_len_ = rx_off_ = 0;
  open_ = inner_.open(host, port, timeout_ms) == tb::Err::Ok;
  return open_ ? 1 : 0;
}

size_t TransportByteClient::write(const uint8_t* data, size_t len) {
  if (!open_ || inner_.write_all(data, len) != tb::Err::Ok) return 0;
  return len;
}

int TransportByteClient::available() {
  if (rx_off_ < rx_len_) return static_cast<int>(rx_len_ - rx_off_);
  if (!open_ || peer_closed_) return 0;
  size_t got = 0;
  const tb::Err e = inner_.read_some(rx_, sizeof(rx_), &got, 1);
  if (e == tb::Err::Ok) {
    rx_len_ = got;
    rx_off_ = 0;
  } else if (e != tb::Err::RecvTimeout) {
    peer_closed_ = true;  // closed or failed: nothing more will come
  }
  return static_cast<int>(rx_len_ - rx_off_);
}

int TransportByteClient::read(uint8_t* buf, size_t len) {
  if (available() <= 0) return -1;
  const size_t n = rx_len_ - rx_off_ < len ? rx_len_ - rx_off_ : len;
  memcpy(buf, rx_ + rx_off_, n);
  rx_off_ += n;
  return static_cast<int>(n);
}

void TransportByteClient::stop() {
  if (open_) inner_.close();
  open_ = false;
}

bool TransportByteClient::connected() { return open_ && (!peer_closed_ || rx_off_ < rx_len_); }

void TransportByteClient::describe(tb::TransportStats* stats) const {
  const tb::TransportStats& s = inner_.stats();
  memcpy(stats->tls_version, s.tls_version, sizeof(stats->tls_version));
  memcpy(stats->cipher_suite, s.cipher_suite, sizeof(stats->cipher_suite));
  stats->cipher_id = s.cipher_id;
}

}  // namespace vdev
