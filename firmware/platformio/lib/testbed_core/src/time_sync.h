// NTP-style clock exchanges between the board and the lab's time-echo service
// (orchestrator/clients/time_echo.py) over the board's own network path (UDP).
//
// Each exchange: the board stamps t1 (its wall clock), sends a request carrying a sequence number
// and t1; the server stamps t2 on receipt and t3 just before it answers, on its clock; the board
// stamps t4 when the answer is in. orchestrator/analysis/clock.py turns the samples taken before
// and after a cell into an offset, a drift and their bound (docs/measurement-notes.md).
//
// Wire format (version 1): every datagram, request and reply, is exactly 40 bytes, all integers
// big-endian (network byte order). Requests are as long as replies so both directions carry the
// same number of bytes.
//
//   offset size field
//        0    4 magic    "TBTS" (0x54 0x42 0x54 0x53)
//        4    1 version  1
//        5    1 kind     1 = request (board -> lab), 2 = reply (lab -> board)
//        6    2 flags    request: 0; reply: bit 0 set = t2 is a kernel receive timestamp
//        8    4 seq      uint32, chosen by the board, echoed by the server
//       12    4 reserved 0
//       16    8 t1_us    int64, board wall clock (us since the Unix epoch), echoed by the server
//       24    8 t2_us    int64, server clock when the request arrived (request: 0)
//       32    8 t3_us    int64, server clock when the reply left (request: 0)
//
// A reply is accepted only when its size, magic, version and kind are right, its seq AND t1 are
// those of the request outstanding, and t3 >= t2; anything else (a stale or duplicate reply, a
// reply to an earlier call, garbage) is discarded and the wait goes on. A request without a
// valid reply within kTimeSyncReplyTimeoutMs is lost; the next exchange goes on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "clock.h"
#include "tb_error.h"

namespace tb {

struct TimeSample {
  int64_t t1_us, t2_us, t3_us, t4_us;  // t1,t4 board clock; t2,t3 server clock
};

// A connected datagram socket to one server (POSIX UDP on the host, WiFiUDP on the ESP32).
class Datagram {
 public:
  virtual ~Datagram() = default;
  virtual Err open(const char* host, uint16_t port) = 0;
  // Sends one datagram of len bytes.
  virtual Err send(const uint8_t* data, size_t len) = 0;
  // Receives one datagram (truncated to cap); Err::RecvTimeout when none came within timeout_ms.
  virtual Err recv(uint8_t* buf, size_t cap, size_t* len, uint32_t timeout_ms) = 0;
  virtual void close() = 0;
};

constexpr uint32_t kTimeSyncReplyTimeoutMs = 500;  // a reply later than this is lost
constexpr uint32_t kTimeSyncGapMs = 10;            // pause between exchanges (spreads them over WiFi slots)

// Runs `count` exchanges with the time-echo service at host:port. Valid samples go to out[0..*got)
// in the order taken (out holds count entries); lost exchanges leave no sample. t1 and t4 are
// clock.wall_us(). Returns Ok when at least one sample was taken; Err::TimeSyncNoReply when none
// was; the Datagram's error when it cannot be opened, a send fails or a receive fails other than
// by timing out; Err::InvalidArgument for a null pointer or count 0. The Datagram is closed on return.
Err time_sync(Datagram& d, Clock& clock, const char* host, uint16_t port, uint32_t count, TimeSample* out,
              uint32_t* got);

// The wire format above, for the client, its tests and anyone writing another server.
namespace timesync_wire {

constexpr size_t kSize = 40;
constexpr uint8_t kMagic[4] = {0x54, 0x42, 0x54, 0x53};  // "TBTS"
constexpr uint8_t kVersion = 1;
constexpr uint8_t kKindRequest = 1;
constexpr uint8_t kKindReply = 2;
constexpr uint16_t kFlagKernelRxTimestamp = 0x0001;

struct Reply {
  uint16_t flags;
  uint32_t seq;
  int64_t t1_us, t2_us, t3_us;
};

// Writes the request for (seq, t1_us) into out (kSize bytes).
void encode_request(uint32_t seq, int64_t t1_us, uint8_t out[kSize]);
// Writes a reply (what the server sends; used by tests).
void encode_reply(const Reply& r, uint8_t out[kSize]);
// Parses a reply: Ok, or Err::Malformed (wrong size, magic, kind or t3 < t2) / Err::Protocol (version).
Err decode_reply(const uint8_t* data, size_t len, Reply* out);

}  // namespace timesync_wire
}  // namespace tb
