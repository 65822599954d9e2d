// MQTT over WebSocket (RFC 6455, the `mqtt` subprotocol of MQTT 3.1.1 section 6 / MQTT 5 section 6): the frame
// codec and WsTransport, a Transport over another Transport (PlainTcp, TlsTransport or ClientTransport: ws over
// TCP, wss over TLS). open() opens the inner transport and sends the HTTP/1.1 upgrade (GET <path>, Upgrade:
// websocket, Sec-WebSocket-Protocol: mqtt, a fresh Sec-WebSocket-Key) and checks the 101 answer's
// Sec-WebSocket-Accept and subprotocol. Every write_all() is ONE masked binary frame (the publisher writes one
// MQTT packet per call: one frame per packet), its mask key drawn from the transport's splitmix64 state
// (splitmix64 of connection_mode.h); read_some() hands over the payload of the broker's unmasked binary frames,
// answers a ping with a pong and a close with a close. No extension is offered (no permessage-deflate): the bytes
// on the wire are the MQTT packets and the frame headers, nothing compressed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "clock.h"
#include "payload.h"
#include "transport.h"

namespace tb {

namespace ws {

constexpr uint8_t kOpContinuation = 0x0, kOpText = 0x1, kOpBinary = 0x2, kOpClose = 0x8, kOpPing = 0x9,
                  kOpPong = 0xA;
constexpr size_t kMaxHeader = 14;  // 2 + 8 (64-bit length) + 4 (mask key)
constexpr size_t kKeyChars = 24;   // base64 of 16 bytes
constexpr size_t kAcceptChars = 28;  // base64 of SHA-1's 20 bytes

// The header's size for a payload of len bytes: 2, +2 beyond 125, +8 beyond 65535; +4 when masked.
size_t header_size(uint64_t len, bool masked);
// Writes a FIN frame's header (out has kMaxHeader bytes); returns its size. mask: the 4-byte key, nullptr unmasked.
size_t encode_header(uint8_t* out, uint8_t opcode, uint64_t len, const uint8_t* mask);
// XORs data with the key, starting at key byte `offset % 4` (masking and unmasking are the same).
void apply_mask(uint8_t* data, size_t len, const uint8_t mask[4], size_t offset = 0);

struct FrameHeader {
  bool fin = false;
  uint8_t opcode = 0;
  bool masked = false;
  uint8_t mask[4] = {0, 0, 0, 0};
  uint64_t length = 0;
  size_t header_len = 0;
};
// Parses a header from the first n bytes: Ok, NeedMore (n too short) or Malformed (reserved bits set, a
// non-minimal or 64-bit length with its top bit set, a control frame over 125 B or fragmented).
Err decode_header(const uint8_t* in, size_t n, FrameHeader* h);

void sha1(const uint8_t* data, size_t len, uint8_t out[20]);
// Base64 (RFC 4648, with padding) of len bytes into out (4 * ceil(len / 3) chars and a NUL); returns the chars.
size_t base64(const uint8_t* data, size_t len, char* out);
// Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")).
void accept_for(const char* key, char out[kAcceptChars + 1]);

}  // namespace ws

class WsTransport : public Transport {
 public:
  // seed: the mask keys' and the handshake key's splitmix64 state (the device's seed: a run is repeatable).
  WsTransport(Transport& inner, Clock& clock, uint64_t seed, const char* path = "/mqtt");
  ~WsTransport() override;
  WsTransport(const WsTransport&) = delete;
  WsTransport& operator=(const WsTransport&) = delete;

  Err open(const char* host, uint16_t port, uint32_t timeout_ms) override;
  Err write_all(const uint8_t* data, size_t len) override;
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
  void close() override;  // a close frame (1000), then the inner transport's close()
  void abort() override;  // the inner transport's abort(): no close frame
  void set_resumption(SessionResumption r) override { inner_.set_resumption(r); }
  Err keep_session(KeptSession* out) override { return inner_.keep_session(out); }
  Err restore_session(const KeptSession& in) override { return inner_.restore_session(in); }
  void power_off() override { inner_.power_off(); }
  const char* error_text() const override;
  const TransportStats& stats() const override;
  const TlsOptions* tls_options() const override { return inner_.tls_options(); }

  static constexpr size_t kFrameCapacity = kMaxPayload + 512 + ws::kMaxHeader;

 private:
  Err upgrade(const char* host, uint16_t port, uint32_t timeout_ms);
  Err check_answer(const char* answer, const char* key);
  Err send_frame(uint8_t opcode, const uint8_t* data, size_t len);
  Err fill(size_t n, uint32_t timeout_ms);  // at least n bytes in in_
  Err next_frame(uint32_t timeout_ms);      // reads headers (and control frames) until a data frame's
  void consume(size_t n);
  uint32_t draw();

  Transport& inner_;
  Clock& clock_;
  uint64_t rng_;
  const char* path_;
  bool open_ = false;
  bool own_error_ = false;
  ErrorText err_;
  mutable TransportStats stats_;
  uint64_t left_ = 0;  // payload bytes of the current data frame not handed over yet
  uint8_t in_[512];
  size_t in_len_ = 0;
  uint8_t out_[kFrameCapacity];
};

}  // namespace tb
