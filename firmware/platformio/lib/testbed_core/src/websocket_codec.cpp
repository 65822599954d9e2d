// The WebSocket frame codec, SHA-1 and base64 of websocket.h (RFC 6455 sections 5.2 and 1.3; SHA-1 as FIPS 180-4
// gives it: the handshake's only use of it, no security rests on it).
#include <cstring>

#include "websocket.h"

namespace tb {
namespace ws {

size_t header_size(uint64_t len, bool masked) {
  const size_t base = len <= 125 ? 2 : (len <= 0xFFFF ? 4 : 10);
  return base + (masked ? 4 : 0);
}

size_t encode_header(uint8_t* out, uint8_t opcode, uint64_t len, const uint8_t* mask) {
  size_t n = 0;
  out[n++] = static_cast<uint8_t>(0x80 | (opcode & 0x0F));
  const uint8_t m = mask != nullptr ? 0x80 : 0x00;
  if (len <= 125) {
    out[n++] = static_cast<uint8_t>(m | len);
  } else if (len <= 0xFFFF) {
    out[n++] = static_cast<uint8_t>(m | 126);
    out[n++] = static_cast<uint8_t>(len >> 8);
    out[n++] = static_cast<uint8_t>(len);
  } else {
    out[n++] = static_cast<uint8_t>(m | 127);
    for (int shift = 56; shift >= 0; shift -= 8) out[n++] = static_cast<uint8_t>(len >> shift);
  }
  if (mask != nullptr) {
    memcpy(out + n, mask, 4);
    n += 4;
  }
  return n;
}

void apply_mask(uint8_t* data, size_t len, const uint8_t mask[4], size_t offset) {
  for (size_t i = 0; i < len; ++i) data[i] ^= mask[(i + offset) & 3];
}

Err decode_header(const uint8_t* in, size_t n, FrameHeader* h) {
  if (n < 2) return Err::NeedMore;
  *h = FrameHeader();
  h->fin = (in[0] & 0x80) != 0;
  h->opcode = in[0] & 0x0F;
  if ((in[0] & 0x70) != 0) return Err::Malformed;  // RSV1-3: no extension was negotiated
  h->masked = (in[1] & 0x80) != 0;
  const uint8_t len7 = in[1] & 0x7F;
  const size_t extra = len7 == 126 ? 2 : (len7 == 127 ? 8 : 0);
  h->header_len = 2 + extra + (h->masked ? 4 : 0);
  if (n < h->header_len) return Err::NeedMore;
  h->length = len7;
  if (extra > 0) {
    h->length = 0;
    for (size_t i = 0; i < extra; ++i) h->length = (h->length << 8) | in[2 + i];
    if ((extra == 2 && h->length <= 125) || (extra == 8 && (h->length <= 0xFFFF || (in[2] & 0x80) != 0))) {
      return Err::Malformed;  // not the minimal length encoding, or the 64-bit length's top bit set
    }
  }
  if (h->masked) memcpy(h->mask, in + 2 + extra, 4);
  if ((h->opcode & 0x08) != 0 && (h->length > 125 || !h->fin)) return Err::Malformed;
  return Err::Ok;
}

namespace {

uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

void sha1_block(uint32_t hs[5], const uint8_t* p) {
  uint32_t w[80];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t{p[4 * i]} << 24) | (uint32_t{p[4 * i + 1]} << 16) | (uint32_t{p[4 * i + 2]} << 8) | p[4 * i + 3];
  }
  for (int i = 16; i < 80; ++i) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = hs[0], b = hs[1], c = hs[2], d = hs[3], e = hs[4];
  for (int i = 0; i < 80; ++i) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d), k = 0x5A827999;
    } else if (i < 40) {
      f = b ^ c ^ d, k = 0x6ED9EBA1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
    } else {
      f = b ^ c ^ d, k = 0xCA62C1D6;
    }
    const uint32_t t = rol(a, 5) + f + e + k + w[i];
    e = d, d = c, c = rol(b, 30), b = a, a = t;
  }
  hs[0] += a, hs[1] += b, hs[2] += c, hs[3] += d, hs[4] += e;
}

}  // namespace

void sha1(const uint8_t* data, size_t len, uint8_t out[20]) {
  uint32_t hs[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  size_t done = 0;
  for (; len - done >= 64; done += 64) sha1_block(hs, data + done);
  uint8_t tail[128] = {0};
  const size_t rest = len - done;
  memcpy(tail, data + done, rest);
  tail[rest] = 0x80;
  const size_t blocks = rest + 9 <= 64 ? 1 : 2;
  const uint64_t bits = static_cast<uint64_t>(len) * 8;
  for (int i = 0; i < 8; ++i) tail[blocks * 64 - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  for (size_t b = 0; b < blocks; ++b) sha1_block(hs, tail + 64 * b);
  for (int i = 0; i < 20; ++i) out[i] = static_cast<uint8_t>(hs[i / 4] >> (24 - 8 * (i % 4)));
}

size_t base64(const uint8_t* data, size_t len, char* out) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = 0;
  for (size_t i = 0; i < len; i += 3) {
    const uint32_t v = (uint32_t{data[i]} << 16) | (i + 1 < len ? uint32_t{data[i + 1]} << 8 : 0) |
                       (i + 2 < len ? data[i + 2] : 0);
    out[n++] = kAlphabet[(v >> 18) & 63];
    out[n++] = kAlphabet[(v >> 12) & 63];
    out[n++] = i + 1 < len ? kAlphabet[(v >> 6) & 63] : '=';
    out[n++] = i + 2 < len ? kAlphabet[v & 63] : '=';
  }
  out[n] = '\0';
  return n;
}

void accept_for(const char* key, char out[kAcceptChars + 1]) {
  static const char kGuid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  uint8_t joined[64 + sizeof(kGuid)];
  size_t n = strlen(key);
  if (n > 64) n = 64;
  memcpy(joined, key, n);
  memcpy(joined + n, kGuid, sizeof(kGuid) - 1);
  uint8_t digest[20];
  sha1(joined, n + sizeof(kGuid) - 1, digest);
  base64(digest, sizeof(digest), out);
}

}  // namespace ws
}  // namespace tb
