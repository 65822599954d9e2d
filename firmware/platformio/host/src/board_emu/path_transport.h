// tb::Transport decorator: the MQTT connection over board-emu's emulated path, installed in the
// BoardSession as its TransportFilter (it wraps the run's PlainTcp or TlsTransport).
//
// Uplink, a delay line: write_all() takes the bytes (a copy) and returns at once; they are handed to
// the inner transport (and so to the TCP socket) when the uplink's delay has passed - by the next
// transport call or by the board's sleep (DriftClock::set_sleep_work), whichever comes first. So
// the board's schedule is not slowed by the path, and packets leave in order (FIFO, net_path.h).
// A write that fails after write_all() returned is reported by the next call.
// Downlink: what the inner transport returns is buffered and given to the board only after the
// downlink's delay from when it was read; a peer close is held the same way.
// With a truth log, per PUBLISH: a "send" row (the true and board time the core stamped it with,
// i.e. its t_send_us), a "due" row (when the path releases it: the drawn delay after it was handed
// over, FIFO applied) and a "wire" row (when its bytes really went to the inner transport; after
// "due" by the host's scheduling latency).
// Not delayed: the TCP connect and the TLS handshake (both inside the inner transport's open()).
// Once the path is dropped (NetPath::dropped): write_all() takes the bytes and throws them away (a TCP
// send buffer in front of a dead link), read_some() sees nothing until its timeout (RecvTimeout),
// open() never connects (ConnectTimeout after its timeout); what was in flight is lost.
#pragma once

#include <deque>
#include <vector>

#include "board_session.h"
#include "drift_clock.h"
#include "net_path.h"
#include "transport.h"

namespace vdev {

class PathTransport : public tb::Transport, public tb::TransportFilter, public TimedWork {
 public:
  PathTransport(tb::Clock& host, DriftClock& board, NetPath& path, TruthLog* truth)
      : host_(host), board_(board), path_(path), truth_(truth) {}

  // TransportFilter
  tb::Transport* attach(tb::Transport& inner) override;
  void detach() override;

  // Transport
  tb::Err open(const char* host, uint16_t port, uint32_t timeout_ms) override;
  tb::Err write_all(const uint8_t* data, size_t len) override;
  tb::Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
  void close() override;  // sends what is still in the delay line first
  void abort() override;  // the same, then the inner transport's abort (no TLS close_notify)
  void set_resumption(tb::SessionResumption r) override;
  const char* error_text() const override;
  const tb::TransportStats& stats() const override;

  // TimedWork
  int64_t next_due_mono_us() const override;
  void run_due() override;

 private:
  struct Pending {
    int64_t release_mono_us;
    std::vector<uint8_t> bytes;
    bool publish;
    uint32_t seq;
  };
  void reset();
  void hand_over(const Pending& p);
  void note_publish(const uint8_t* data, size_t len, bool* publish, uint32_t* seq);
  tb::Err dropped_wait(uint32_t timeout_ms, tb::Err e, const char* what);

  tb::Clock& host_;
  DriftClock& board_;
  NetPath& path_;
  TruthLog* truth_;
  tb::Transport* inner_ = nullptr;
  tb::TransportStats none_;
  std::deque<Pending> queue_;
  tb::Err failed_ = tb::Err::Ok;  // a delayed write failed: every later call returns it
  std::vector<uint8_t> rx_;       // read from the inner transport, not yet given to the board
  size_t rx_pos_ = 0;
  int64_t rx_release_mono_us_ = 0;
  char drop_err_[192] = "";  // the error text of a dropped path's timeout
};

}  // namespace vdev
