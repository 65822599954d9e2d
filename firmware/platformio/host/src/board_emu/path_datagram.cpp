#include "path_datagram.h"

#include <cstdio>
#include <cstring>

namespace vdev {
namespace {

namespace w = tb::timesync_wire;

uint64_t get_be(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// (seq, t1) of a time-sync request.
bool parse_request(const uint8_t* data, size_t len, uint32_t* seq, int64_t* t1) {
  if (len != w::kSize || memcmp(data, w::kMagic, sizeof(w::kMagic)) != 0 || data[5] != w::kKindRequest) return false;
  *seq = static_cast<uint32_t>(get_be(data + 8, 4));
  *t1 = static_cast<int64_t>(get_be(data + 16, 8));
  return true;
}

}  // namespace

tb::Err PathDatagram::send(const uint8_t* data, size_t len) {
  uint32_t seq = 0;
  int64_t t1 = 0;
  if (truth_ != nullptr && parse_request(data, len, &seq, &t1)) {
    const DriftClock::Stamp s = board_.last_wall();  // time_sync stamped t1 just before this call
    if (s.board_us == t1) {
      truth_->row("t1", seq, s.true_us, s.board_us);
    } else {
      fprintf(stderr, "board-emu: truth log: request %u carries t1=%lld, not the last board stamp %lld\n",
              static_cast<unsigned>(seq), static_cast<long long>(t1), static_cast<long long>(s.board_us));
    }
  }
  if (path_.is_down(host_.mono_us())) return tb::Err::Ok;  // the network is down: never sent
  if (path_.up.active()) sleep_serving(host_, nullptr, path_.up.release_at(host_.mono_us()), true);
  return inner_.send(data, len);
}

tb::Err PathDatagram::recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) {
  if (path_.is_down(host_.mono_us()) || drop_replies) {  // nothing comes
    host_.sleep_until_mono_us(host_.mono_us() + static_cast<int64_t>(timeout_ms) * 1000);
    return tb::Err::RecvTimeout;
  }
  tb::Err e = inner_.recv(buf, cap, len, timeout_ms);
  if (e != tb::Err::Ok) return e;
  if (path_.down.active()) sleep_serving(host_, nullptr, path_.down.release_at(host_.mono_us()), true);
  w::Reply r;
  if (truth_ != nullptr && w::decode_reply(buf, *len, &r) == tb::Err::Ok) {
    TruthLog* truth = truth_;
    const uint32_t seq = r.seq;
    // time_sync stamps t4 with the first wall_us() after recv() returns
    board_.on_next_wall([truth, seq](const DriftClock::Stamp& s) { truth->row("t4", seq, s.true_us, s.board_us); });
  }
  return tb::Err::Ok;
}

}  // namespace vdev
