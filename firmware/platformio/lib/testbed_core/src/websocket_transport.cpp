// WsTransport (websocket.h): the HTTP/1.1 upgrade, masked frames up, unmasked frames down.
#include <cstdio>
#include <cstring>

#include "websocket.h"

namespace tb {

namespace {

// The value of header `name` (lower case, with its colon) in an HTTP answer, case-insensitively; "" when absent.
bool header_value(const char* answer, const char* name, char* out, size_t cap) {
  const size_t n = strlen(name);
  for (const char* line = strstr(answer, "\r\n"); line != nullptr; line = strstr(line + 2, "\r\n")) {
    const char* p = line + 2;
    size_t i = 0;
    while (i < n && p[i] != '\0' && (p[i] | 0x20) == name[i]) ++i;
    if (i < n) continue;
    p += n;
    while (*p == ' ' || *p == '\t') ++p;
    size_t len = 0;
    while (p[len] != '\0' && p[len] != '\r' && len + 1 < cap) ++len;
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) --len;
    memcpy(out, p, len);
    out[len] = '\0';
    return true;
  }
  out[0] = '\0';
  return false;
}

}  // namespace

WsTransport::WsTransport(Transport& inner, Clock& clock, uint64_t seed, const char* path)
    : inner_(inner), clock_(clock), rng_(seed ^ 0x7773U), path_(path) {}

WsTransport::~WsTransport() { open_ = false; }  // the inner transport closes its own socket

uint32_t WsTransport::draw() {
  uint64_t x = (rng_ += 0x9E3779B97F4A7C15ULL);  // splitmix64, as connection_mode.cpp's
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 32);
}

const char* WsTransport::error_text() const { return own_error_ ? err_.c_str() : inner_.error_text(); }

const TransportStats& WsTransport::stats() const {
  const int64_t upgrade = stats_.ws_upgrade_us;
  stats_ = inner_.stats();
  stats_.ws_upgrade_us = upgrade;
  return stats_;
}

Err WsTransport::open(const char* host, uint16_t port, uint32_t timeout_ms) {
  abort();
  own_error_ = false;
  err_.clear();
  stats_.ws_upgrade_us = -1;
  in_len_ = 0;
  left_ = 0;
  Err e = inner_.open(host, port, timeout_ms);
  if (e != Err::Ok) return e;
  const int64_t start = clock_.mono_us();
  e = upgrade(host, port, timeout_ms);
  if (e != Err::Ok) {
    inner_.abort();
    return e;
  }
  stats_.ws_upgrade_us = clock_.mono_us() - start;
  open_ = true;
  return Err::Ok;
}

Err WsTransport::upgrade(const char* host, uint16_t port, uint32_t timeout_ms) {
  uint8_t nonce[16];
  for (size_t i = 0; i < sizeof(nonce); i += 4) {
    const uint32_t r = draw();
    memcpy(nonce + i, &r, 4);
  }
  char key[ws::kKeyChars + 1];
  ws::base64(nonce, sizeof(nonce), key);
  char request[400];
  const int n = snprintf(request, sizeof(request),
                         "GET %s HTTP/1.1\r\nHost: %s:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Protocol: mqtt\r\nSec-WebSocket-Version: 13\r\n\r\n",
                         path_, host, static_cast<unsigned>(port), key);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(request)) {
    own_error_ = true;
    err_.set("WebSocket upgrade: the request does not fit (host %s)", host);
    return Err::InvalidArgument;
  }
  Err e = inner_.write_all(reinterpret_cast<const uint8_t*>(request), static_cast<size_t>(n));
  if (e != Err::Ok) return e;
  while (true) {  // the answer ends with an empty line; what follows it is the first frame's
    in_[in_len_] = '\0';
    const char* end = strstr(reinterpret_cast<const char*>(in_), "\r\n\r\n");
    if (end != nullptr) {
      const size_t head = static_cast<size_t>(end - reinterpret_cast<const char*>(in_)) + 4;
      char answer[sizeof(in_)];
      memcpy(answer, in_, head);
      answer[head] = '\0';
      consume(head);
      return check_answer(answer, key);
    }
    if (in_len_ + 1 >= sizeof(in_)) break;
    size_t got = 0;
    e = inner_.read_some(in_ + in_len_, sizeof(in_) - 1 - in_len_, &got, timeout_ms);
    if (e != Err::Ok) return e;
    in_len_ += got;
  }
  own_error_ = true;
  err_.set("WebSocket upgrade: the broker's answer is over %u bytes", static_cast<unsigned>(sizeof(in_) - 1));
  return Err::Protocol;
}

Err WsTransport::check_answer(const char* answer, const char* key) {
  own_error_ = true;
  if (strncmp(answer, "HTTP/1.1 101", 12) != 0) {
    const char* eol = strstr(answer, "\r\n");
    err_.set("WebSocket upgrade refused: %.*s", static_cast<int>(eol - answer), answer);
    return Err::Protocol;
  }
  char expected[ws::kAcceptChars + 1], value[128];
  ws::accept_for(key, expected);
  if (!header_value(answer, "sec-websocket-accept:", value, sizeof(value)) || strcmp(value, expected) != 0) {
    err_.set("WebSocket upgrade: Sec-WebSocket-Accept '%s' is not '%s'", value, expected);
    return Err::Protocol;
  }
  if (!header_value(answer, "sec-websocket-protocol:", value, sizeof(value)) || strcmp(value, "mqtt") != 0) {
    err_.set("WebSocket upgrade: the broker chose subprotocol '%s', not 'mqtt'", value);
    return Err::Protocol;
  }
  if (header_value(answer, "sec-websocket-extensions:", value, sizeof(value))) {
    err_.set("WebSocket upgrade: the broker named extensions '%s', none was offered", value);
    return Err::Protocol;
  }
  own_error_ = false;
  err_.clear();
  return Err::Ok;
}

Err WsTransport::send_frame(uint8_t opcode, const uint8_t* data, size_t len) {
  if (len + ws::kMaxHeader > sizeof(out_)) {
    own_error_ = true;
    err_.set("WebSocket frame of %u bytes is over the transport's %u", static_cast<unsigned>(len),
             static_cast<unsigned>(sizeof(out_) - ws::kMaxHeader));
    return Err::BufferTooSmall;
  }
  const uint32_t r = draw();
  uint8_t mask[4];
  memcpy(mask, &r, 4);
  const size_t h = ws::encode_header(out_, opcode, len, mask);
  if (len > 0) memcpy(out_ + h, data, len);
  ws::apply_mask(out_ + h, len, mask);
  return inner_.write_all(out_, h + len);  // one write: over TLS one record per frame
}

Err WsTransport::write_all(const uint8_t* data, size_t len) {
  if (!open_) return Err::NotConnected;
  return send_frame(ws::kOpBinary, data, len);
}

void WsTransport::consume(size_t n) {
  memmove(in_, in_ + n, in_len_ - n);
  in_len_ -= n;
}

Err WsTransport::fill(size_t n, uint32_t timeout_ms) {
  while (in_len_ < n) {
    size_t got = 0;
    const Err e = inner_.read_some(in_ + in_len_, sizeof(in_) - in_len_, &got, timeout_ms);
    if (e != Err::Ok) return e;
    in_len_ += got;
  }
  return Err::Ok;
}

Err WsTransport::next_frame(uint32_t timeout_ms) {
  while (left_ == 0) {
    ws::FrameHeader h;
    Err e = ws::decode_header(in_, in_len_, &h);
    if (e == Err::NeedMore) {
      e = fill(in_len_ < 2 ? 2 : in_len_ + 1, timeout_ms);
      if (e != Err::Ok) return e;
      continue;
    }
    if (e != Err::Ok) {
      own_error_ = e == Err::Malformed;
      if (own_error_) err_.set("malformed WebSocket frame header from the broker");
      return e == Err::Malformed ? Err::Protocol : e;
    }
    own_error_ = true;
    if (h.masked || h.opcode == ws::kOpText || (h.opcode > ws::kOpBinary && h.opcode < ws::kOpClose) ||
        h.opcode > ws::kOpPong) {
      err_.set("WebSocket frame the broker may not send (opcode %u%s)", h.opcode, h.masked ? ", masked" : "");
      return Err::Protocol;
    }
    own_error_ = false;
    if ((h.opcode & 0x08) == 0) {  // binary or its continuation: the caller's bytes
      consume(h.header_len);
      left_ = h.length;
      continue;
    }
    e = fill(h.header_len + h.length, timeout_ms);  // a control frame, at most 125 B: whole
    if (e != Err::Ok) return e;
    uint8_t body[125];
    memcpy(body, in_ + h.header_len, h.length);
    consume(h.header_len + h.length);
    if (h.opcode == ws::kOpPing) e = send_frame(ws::kOpPong, body, h.length);
    if (h.opcode == ws::kOpClose) {
      send_frame(ws::kOpClose, body, h.length >= 2 ? 2 : 0);  // echo its status code, as section 5.5.1 asks
      own_error_ = true;
      err_.set("the broker closed the WebSocket (status %u)", h.length >= 2 ? (body[0] << 8) | body[1] : 1005);
      inner_.close();
      open_ = false;
      return Err::PeerClosed;
    }
    if (e != Err::Ok) return e;
  }
  return Err::Ok;
}

Err WsTransport::read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  *got = 0;
  if (!open_) return Err::NotConnected;
  Err e = next_frame(timeout_ms);
  if (e == Err::PeerClosed && open_) {  // the TCP (or TLS) stream ended under it: no close frame into a closed socket
    inner_.close();
    open_ = false;
  }
  if (e != Err::Ok) return e;
  size_t want = left_ < cap ? static_cast<size_t>(left_) : cap;
  if (in_len_ > 0) {
    if (want > in_len_) want = in_len_;
    memcpy(buf, in_, want);
    consume(want);
  } else {
    e = inner_.read_some(buf, want, &want, timeout_ms);
    if (e == Err::PeerClosed) {
      inner_.close();
      open_ = false;
    }
    if (e != Err::Ok) return e;
  }
  left_ -= want;
  *got = want;
  return Err::Ok;
}

void WsTransport::close() {
  if (open_) {
    const uint8_t normal[2] = {0x03, 0xE8};  // 1000: normal closure
    send_frame(ws::kOpClose, normal, sizeof(normal));
    inner_.close();
  }
  open_ = false;
}

void WsTransport::abort() {
  if (open_) inner_.abort();
  open_ = false;
}

}  // namespace tb
