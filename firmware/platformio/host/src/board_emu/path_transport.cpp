#include "path_transport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mqtt_codec.h"

namespace vdev {
namespace {

constexpr size_t kReadChunk = 4096;

// The integer after "key": in a JSON text (the payload's "n" and "t").
bool json_int(const uint8_t* text, size_t len, const char* key, long long* out) {
  const size_t klen = strlen(key);
  for (size_t i = 0; i + klen < len; ++i) {
    if (memcmp(text + i, key, klen) != 0) continue;
    char digits[24];
    size_t n = 0;
    for (size_t j = i + klen; j < len && n + 1 < sizeof(digits); ++j) {
      char c = static_cast<char>(text[j]);
      if (!(c == '-' || (c >= '0' && c <= '9'))) break;
      digits[n++] = c;
    }
    if (n == 0) return false;
    digits[n] = '\0';
    *out = strtoll(digits, nullptr, 10);
    return true;
  }
  return false;
}

}  // namespace

tb::Transport* PathTransport::attach(tb::Transport& inner) {
  reset();
  inner_ = &inner;
  return this;
}

void PathTransport::detach() {
  reset();
  inner_ = nullptr;
}

void PathTransport::reset() {
  queue_.clear();
  failed_ = tb::Err::Ok;
  rx_.clear();
  rx_pos_ = 0;
  drop_err_[0] = '\0';
}

// A dropped path: nothing comes; the call ends with e after its timeout (or a signal).
tb::Err PathTransport::dropped_wait(uint32_t timeout_ms, tb::Err e, const char* what) {
  queue_.clear();
  rx_.clear();
  rx_pos_ = 0;
  host_.sleep_until_mono_us(host_.mono_us() + static_cast<int64_t>(timeout_ms) * 1000);
  snprintf(drop_err_, sizeof(drop_err_), "%s within %u ms (board-emu: the network is down, "
           "--network-drop-after-messages)", what, static_cast<unsigned>(timeout_ms));
  return e;
}

tb::Err PathTransport::open(const char* host, uint16_t port, uint32_t timeout_ms) {
  if (inner_ == nullptr) return tb::Err::NotConnected;
  reset();
  const int64_t deadline = host_.mono_us() + static_cast<int64_t>(timeout_ms) * 1000;
  if (path_.is_down(host_.mono_us()) && path_.back_at_mono_us < deadline) {  // an outage that ends in time: the SYN
    host_.sleep_until_mono_us(path_.back_at_mono_us);                        // sent again gets through
    timeout_ms = static_cast<uint32_t>((deadline - host_.mono_us()) / 1000);
  }
  if (path_.is_down(host_.mono_us())) {
    char what[128];
    snprintf(what, sizeof(what), "TCP connect to %s:%u did not complete", host, static_cast<unsigned>(port));
    return dropped_wait(timeout_ms, tb::Err::ConnectTimeout, what);
  }
  return inner_->open(host, port, timeout_ms);
}

void PathTransport::note_publish(const uint8_t* data, size_t len, bool* publish, uint32_t* seq) {
  *publish = false;
  tb::mqtt::FixedHeader h;
  if (tb::mqtt::decode_fixed_header(data, len, &h) != tb::Err::Ok || h.type != 3) return;
  tb::mqtt::PublishView v;
  if (tb::mqtt::decode_publish(data, len, &v) != tb::Err::Ok) return;
  long long n = 0, t = 0;
  if (!json_int(v.payload, v.payload_len, "\"n\":", &n) || !json_int(v.payload, v.payload_len, "\"t\":", &t)) return;
  *publish = true;
  *seq = static_cast<uint32_t>(n);
  const DriftClock::Stamp s = board_.last_wall();  // the Publisher stamped t_send just before encoding
  if (s.board_us == t) {
    truth_->row("send", *seq, s.true_us, s.board_us);
  } else {
    fprintf(stderr, "board-emu: truth log: PUBLISH %lld carries t=%lld, not the last board stamp %lld\n", n, t,
            static_cast<long long>(s.board_us));
  }
}

void PathTransport::hand_over(const Pending& p) {
  if (p.publish) {
    const DriftClock::Stamp s = board_.now();
    truth_->row("wire", p.seq, s.true_us, s.board_us);
  }
  tb::Err e = inner_->write_all(p.bytes.data(), p.bytes.size());
  if (e != tb::Err::Ok) {
    failed_ = e;
    queue_.clear();
  }
}

tb::Err PathTransport::write_all(const uint8_t* data, size_t len) {
  if (inner_ == nullptr) return tb::Err::NotConnected;
  if (failed_ != tb::Err::Ok) return failed_;
  if (path_.is_down(host_.mono_us())) {  // taken, never written
    queue_.clear();
    return tb::Err::Ok;
  }
  Pending p;
  p.publish = false;
  p.seq = 0;
  if (truth_ != nullptr) note_publish(data, len, &p.publish, &p.seq);  // before anything else reads a clock
  run_due();
  if (failed_ != tb::Err::Ok) return failed_;
  const int64_t now = host_.mono_us();
  p.release_mono_us = path_.up.active() ? path_.up.release_at(now) : now;
  p.bytes.assign(data, data + len);
  if (p.publish) {
    const DriftClock::Stamp due = board_.at(p.release_mono_us);
    truth_->row("due", p.seq, due.true_us, due.board_us);
  }
  if (queue_.empty() && p.release_mono_us <= now) {
    hand_over(p);
    return failed_;
  }
  queue_.push_back(std::move(p));
  return tb::Err::Ok;
}

int64_t PathTransport::next_due_mono_us() const {
  return queue_.empty() || inner_ == nullptr ? INT64_MAX : queue_.front().release_mono_us;
}

void PathTransport::run_due() {
  if (path_.is_down(host_.mono_us())) queue_.clear();  // in flight when the network went: lost
  while (!queue_.empty() && inner_ != nullptr && failed_ == tb::Err::Ok &&
         queue_.front().release_mono_us <= host_.mono_us()) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    hand_over(p);
  }
}

tb::Err PathTransport::read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  *got = 0;
  if (inner_ == nullptr) return tb::Err::NotConnected;
  if (path_.is_down(host_.mono_us())) return dropped_wait(timeout_ms, tb::Err::RecvTimeout, "no data from the broker");
  if (rx_pos_ < rx_.size()) {  // released already (the hold is served before the first byte is given)
    sleep_serving(host_, this, rx_release_mono_us_, true);
    const size_t n = rx_.size() - rx_pos_ < cap ? rx_.size() - rx_pos_ : cap;
    memcpy(buf, rx_.data() + rx_pos_, n);
    rx_pos_ += n;
    *got = n;
    return tb::Err::Ok;
  }
  const int64_t deadline = host_.mono_us() + static_cast<int64_t>(timeout_ms) * 1000;
  // What is due before the deadline goes out first (the answer may depend on it, e.g. CONNECT).
  while (failed_ == tb::Err::Ok && next_due_mono_us() <= deadline) {
    sleep_serving(host_, this, next_due_mono_us(), true);
  }
  if (failed_ != tb::Err::Ok) return failed_;
  const int64_t left_us = deadline - host_.mono_us();
  const uint32_t left_ms = left_us <= 0 ? 0 : static_cast<uint32_t>((left_us + 999) / 1000);
  rx_.resize(kReadChunk);
  size_t n = 0;
  tb::Err e = inner_->read_some(rx_.data(), rx_.size(), &n, left_ms);
  rx_.resize(e == tb::Err::Ok ? n : 0);
  rx_pos_ = 0;
  if (e != tb::Err::Ok && e != tb::Err::PeerClosed) return e;
  if (path_.down.active()) {
    rx_release_mono_us_ = path_.down.release_at(host_.mono_us());
    sleep_serving(host_, this, rx_release_mono_us_, true);
  }
  if (e != tb::Err::Ok) return e;
  return read_some(buf, cap, got, 0);  // from the buffer
}

void PathTransport::close() {
  if (inner_ == nullptr) return;
  while (failed_ == tb::Err::Ok && !queue_.empty()) sleep_serving(host_, this, next_due_mono_us(), true);
  queue_.clear();
  inner_->close();
}

// What the board wrote before its power went is on the wire already: it still arrives.
void PathTransport::abort() {
  if (inner_ == nullptr) return;
  while (failed_ == tb::Err::Ok && !queue_.empty()) sleep_serving(host_, this, next_due_mono_us(), true);
  queue_.clear();
  inner_->abort();
}

void PathTransport::set_resumption(tb::SessionResumption r) {
  if (inner_ != nullptr) inner_->set_resumption(r);
}

const char* PathTransport::error_text() const {
  if (drop_err_[0] != '\0') return drop_err_;
  return inner_ != nullptr ? inner_->error_text() : "no transport";
}

const tb::TransportStats& PathTransport::stats() const { return inner_ != nullptr ? inner_->stats() : none_; }

}  // namespace vdev
