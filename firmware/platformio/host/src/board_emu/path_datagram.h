// tb::Datagram decorator: the clock exchanges (time_sync) over board-emu's emulated path. A request
// is stamped t1 by the core, then held for the uplink's delay before it is sent; a reply is held for
// the downlink's delay after it was received, before recv() returns (and the core stamps t4).
// With a truth log: a "t1" row per request and a "t4" row per reply (true and board time).
// Once the path is dropped (NetPath::dropped) a request is never sent and recv() sees nothing (RecvTimeout).
// drop_replies: every request is sent, no reply gets through (a firewall that lets the board's datagrams out
// and none back in; board-emu --no-clock-replies).
#pragma once

#include "drift_clock.h"
#include "net_path.h"
#include "time_sync.h"

namespace vdev {

class PathDatagram : public tb::Datagram {
 public:
  // host: the host's own clocks (the path's delays are scheduled on host.mono_us()).
  PathDatagram(tb::Datagram& inner, tb::Clock& host, DriftClock& board, NetPath& path, TruthLog* truth)
      : inner_(inner), host_(host), board_(board), path_(path), truth_(truth) {}

  tb::Err open(const char* host, uint16_t port) override { return inner_.open(host, port); }
  tb::Err send(const uint8_t* data, size_t len) override;
  tb::Err recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) override;
  void close() override { inner_.close(); }

  bool drop_replies = false;

 private:
  tb::Datagram& inner_;
  tb::Clock& host_;
  DriftClock& board_;
  NetPath& path_;
  TruthLog* truth_;
};

}  // namespace vdev
