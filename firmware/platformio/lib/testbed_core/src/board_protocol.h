// The serial control protocol between the host (orchestrator) and a board (the ESP32 or board-emu).
// Defined HERE for C++; the Python mirror is orchestrator/publishers/board/protocol.py and
// tests/firmware/test_board_protocol_mirror.py checks that the two agree (version, line names,
// limits, RUN keys, error names). firmware/platformio/README.md "Serial control protocol" explains it.
//
// Lines are ASCII, '\n' terminated ('\r' before it is ignored), fields `key=value` separated by one space.
// Board -> host:  BANNER, READY, ACK, ERROR, and the run lines CLOCK, SYNC, KEYLOG, HANDSHAKE, MSG, CONN
//                 (one per connection of a non-persistent run), DONE.
// Host -> board:  HELLO (banner + READY again), RUN BEGIN len=N crc=XXXXXXXX, RUN CHUNK i=K <base64>,
//                 RUN END, RUN ABORT. Every chunk is ACKed before the next one is sent (flow control).
//                 STOP (mid-run; version 2): stop before the next message, ERROR Interrupted, READY.
// Version 3: the RUN keys mqtt, session, session_expiry_s, topic_alias, inflight, ack_timeout_ms (a board of
//                 version 2 answers them UnknownKey); DONE adds reconnects=, resent=, lost= for a persistent session.
// The RUN body (decoded from the chunks) is UTF-8 text, one `key=value` per line; in a value a
// backslash is written `\\`, a newline `\n`, a carriage return `\r` (a PEM keeps its line breaks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "connection_mode.h"
#include "device_config.h"
#include "device_options.h"
#include "mqtt_codec.h"
#include "tb_error.h"

namespace tb {
namespace proto {

// The version rule: any change to a line's fields, a command, the framing or the body keys bumps it.
// The host refuses a board whose BANNER carries another version (reflash the board).
constexpr uint32_t kVersion = 4;

// Board -> host: the first word of every line.
constexpr char kLineBanner[] = "BANNER";
constexpr char kLineReady[] = "READY";
constexpr char kLineAck[] = "ACK";
constexpr char kLineError[] = "ERROR";
constexpr char kLineClock[] = "CLOCK";
constexpr char kLineSync[] = "SYNC";
constexpr char kLineKeylog[] = "KEYLOG";
constexpr char kLineHandshake[] = "HANDSHAKE";
constexpr char kLineMsg[] = "MSG";
constexpr char kLineConn[] = "CONN";  // after each connection of a non-persistent run
constexpr char kLineDone[] = "DONE";

// Host -> board.
constexpr char kCmdHello[] = "HELLO";
constexpr char kCmdRun[] = "RUN";
constexpr char kCmdStop[] = "STOP";  // mid-run: stop before the next message (ERROR Interrupted, READY)
constexpr char kRunBegin[] = "BEGIN";
constexpr char kRunChunk[] = "CHUNK";
constexpr char kRunEnd[] = "END";
constexpr char kRunAbort[] = "ABORT";

// What an ACK acknowledges (its second word).
constexpr char kAckBegin[] = "begin";
constexpr char kAckChunk[] = "chunk";
constexpr char kAckRun[] = "run";
constexpr char kAckAbort[] = "abort";

// Framing limits.
constexpr size_t kMaxBody = 8192;         // decoded RUN body bytes (CA + client certificate + key fit)
constexpr size_t kMaxHostLine = 320;      // longest host line the board takes, '\n' included
constexpr size_t kMaxChunkBytes = 192;    // body bytes per chunk at most (256 base64 characters)
constexpr size_t kChunkLineOverhead = 24; // "RUN CHUNK i=65535 " + '\n', rounded up
constexpr uint32_t kTransferTimeoutMs = 10000;  // RUN BEGIN..END: at most this long between two lines
constexpr size_t kMaxRunId = 63;

// Body bytes per chunk for a board whose serial receive buffer holds rx_buf bytes: the whole chunk
// line must fit the buffer, so a host that waits for each ACK can never overflow it.
constexpr size_t chunk_bytes_for(size_t rx_buf) {
  return rx_buf <= kChunkLineOverhead + 4 ? 0
         : ((rx_buf - kChunkLineOverhead) / 4) * 3 > kMaxChunkBytes ? kMaxChunkBytes
                                                                    : ((rx_buf - kChunkLineOverhead) / 4) * 3;
}

// RUN body keys (version 3): the entries of device_options.def the board takes (TB_BOARD), in that
// file's order (the Python side reads them there too: orchestrator/publishers/board/protocol_def.py). Any other
// key is refused (Err::UnknownKey). Required: these; with transport=tls also ca and ciphers.
constexpr opt::Id kRequiredKeys[] = {opt::Id::id,      opt::Id::host,    opt::Id::port,        opt::Id::transport,
                                     opt::Id::payload, opt::Id::samples, opt::Id::interval_us, opt::Id::qos};
constexpr uint32_t kMaxSyncCount = static_cast<uint32_t>(opt::spec(opt::Id::sync_count).max);
constexpr uint32_t kDefaultSyncCount = static_cast<uint32_t>(opt::spec(opt::Id::sync_count).def);
// The connection modes ("mode" key; connection_mode.h). Optional with them: "per_connection" (K >= 1,
// default 1, ignored for persistent) and "close" (kCloseDisconnect, the default, or kCloseDrop).
constexpr char kModePersistent[] = "persistent";       // one MQTT connection for the whole run (the default)
constexpr char kModeReconnect[] = "reconnect";         // a connection per K messages, full TLS handshakes
constexpr char kModeResumeId[] = "resume-id";          // ... TLS 1.2 resumption by session ID
constexpr char kModeResumeTicket[] = "resume-ticket";  // ... TLS 1.2 resumption by session ticket
constexpr char kCloseDisconnect[] = "disconnect";      // MQTT DISCONNECT, the broker's close, close_notify
constexpr char kCloseDrop[] = "drop";                  // the socket just closed (a power loss)
constexpr uint32_t kMaxPerConnection = static_cast<uint32_t>(opt::spec(opt::Id::per_connection).max);

// A RUN's parameters are the board's DeviceConfig (device_config.h), filled by parse_run_body from the body's
// keys; its strings point into the receiver's body buffer.
// Whether the RUN asked for KEYLOG lines (keylog=1; the key is a file on vdevice and fleet, 0|1 here).
bool run_keylog(const DeviceConfig& run);

// zlib's CRC-32 (polynomial 0xEDB88320; Python's zlib.crc32). Pass the previous value to continue.
uint32_t crc32(const uint8_t* data, size_t len, uint32_t crc = 0);

// Standard base64 with padding; Err::BadEncoding for anything else, Err::BufferTooSmall when cap is short.
Err base64_decode(const char* in, size_t in_len, uint8_t* out, size_t cap, size_t* out_len);

// Parses a decoded RUN body in place (values are unescaped and NUL-terminated inside body[0..len)) into the
// board's configuration (DeviceConfig of TB_BOARD: the .def's defaults for the keys not given).
// Err::BadEncoding, UnknownKey, DuplicateKey, MissingKey or InvalidArgument, the key named in err.
Err parse_run_body(char* body, size_t len, DeviceConfig* out, ErrorText* err);

// The RUN BEGIN .. END state machine over the host's lines (the "RUN " already stripped).
class RunReceiver {
 public:
  enum class Step { None, AckBegin, AckChunk, Complete, Aborted };

  // Handles one RUN sub-command. On Ok, *step says what to answer (and chunk_index() for AckChunk);
  // any error resets the transfer (the host starts again with RUN BEGIN).
  Err feed(const char* args, Step* step, ErrorText* err);
  void reset();
  bool active() const { return active_; }
  uint32_t chunk_index() const { return last_index_; }
  // After Step::Complete: the decoded body (NUL-terminated, writable for parse_run_body).
  char* body() { return reinterpret_cast<char*>(body_); }
  size_t body_len() const { return received_; }

 private:
  Err begin(const char* args, ErrorText* err);
  Err chunk(const char* args, ErrorText* err);
  Err end(ErrorText* err);

  bool active_ = false;
  size_t expected_len_ = 0;
  uint32_t expected_crc_ = 0;
  size_t received_ = 0;
  uint32_t next_index_ = 0;
  uint32_t last_index_ = 0;
  uint8_t body_[kMaxBody + 1];
};

}  // namespace proto
}  // namespace tb
