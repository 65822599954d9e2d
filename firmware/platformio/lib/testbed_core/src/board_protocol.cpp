#include "board_protocol.h"

#include <cstdio>
#include <cstring>

#include "board_parse.h"

namespace tb {
namespace proto {

namespace detail {

// Decimal digits only (no sign, no spaces), value <= max.
bool parse_uint(const char* s, size_t len, uint64_t max, uint64_t* out) {
  if (len == 0 || len > 20) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; ++i) {
    if (!is_digit(s[i])) return false;
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (d > max || v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace detail

namespace {

using detail::is_digit;
using detail::parse_uint;

bool parse_hex32(const char* s, size_t len, uint32_t* out) {
  if (len != 8) return false;
  uint32_t v = 0;
  for (size_t i = 0; i < len; ++i) {
    char c = s[i];
    uint32_t d;
    if (is_digit(c)) {
      d = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      d = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return false;
    }
    v = (v << 4) | d;
  }
  *out = v;
  return true;
}

// The value of `key=` among space-separated fields; false when absent.
bool field(const char* args, const char* key, const char** value, size_t* len) {
  const size_t klen = strlen(key);
  const char* p = args;
  while (*p != '\0') {
    while (*p == ' ') ++p;
    const char* end = p;
    while (*end != '\0' && *end != ' ') ++end;
    if (static_cast<size_t>(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      *value = p + klen + 1;
      *len = static_cast<size_t>(end - *value);
      return true;
    }
    p = end;
  }
  return false;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (is_digit(c)) return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t len, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < len; ++i) {
    crc ^= data[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

Err base64_decode(const char* in, size_t in_len, uint8_t* out, size_t cap, size_t* out_len) {
  *out_len = 0;
  if (in_len == 0 || in_len % 4 != 0) return Err::BadEncoding;
  size_t pad = in[in_len - 1] != '=' ? 0 : in[in_len - 2] == '=' ? 2 : 1;
  size_t n = in_len / 4 * 3 - pad;
  if (n > cap) return Err::BufferTooSmall;
  size_t w = 0;
  for (size_t i = 0; i < in_len; i += 4) {
    int v[4];
    for (int j = 0; j < 4; ++j) {
      bool padding_ok = i + 4 == in_len && j >= 4 - static_cast<int>(pad);
      v[j] = padding_ok ? 0 : base64_value(in[i + j]);
      if (v[j] < 0) return Err::BadEncoding;
    }
    uint32_t triple = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                      (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    for (int j = 0; j < 3 && w < n; ++j) out[w++] = static_cast<uint8_t>(triple >> (16 - 8 * j));
  }
  *out_len = n;
  return Err::Ok;
}

void RunReceiver::reset() {
  active_ = false;
  expected_len_ = 0;
  expected_crc_ = 0;
  received_ = 0;
  next_index_ = 0;
}

Err RunReceiver::begin(const char* args, ErrorText* err) {
  reset();  // a new BEGIN replaces a transfer in progress
  const char* len_s = nullptr;
  const char* crc_s = nullptr;
  size_t len_n = 0, crc_n = 0;
  uint64_t len = 0;
  if (!field(args, "len", &len_s, &len_n) || !field(args, "crc", &crc_s, &crc_n) ||
      !parse_uint(len_s, len_n, UINT32_MAX, &len) || !parse_hex32(crc_s, crc_n, &expected_crc_)) {
    err->set("expected RUN BEGIN len=<bytes> crc=<8 hex digits>");
    return Err::BadEncoding;
  }
  if (len == 0) {
    err->set("RUN BEGIN len=0: the body is empty");
    return Err::InvalidArgument;
  }
  if (len > kMaxBody) {
    err->set("RUN body of %llu bytes is larger than this board's %u", static_cast<unsigned long long>(len),
             static_cast<unsigned>(kMaxBody));
    return Err::BodyTooLarge;
  }
  expected_len_ = static_cast<size_t>(len);
  active_ = true;
  return Err::Ok;
}

Err RunReceiver::chunk(const char* args, ErrorText* err) {
  if (!active_) {
    err->set("RUN CHUNK without RUN BEGIN");
    return Err::OutOfSequence;
  }
  const char* i_s = nullptr;
  size_t i_n = 0;
  uint64_t index = 0;
  if (!field(args, "i", &i_s, &i_n) || !parse_uint(i_s, i_n, UINT32_MAX, &index)) {
    err->set("expected RUN CHUNK i=<index> <base64>");
    return Err::BadEncoding;
  }
  if (index < next_index_) {
    err->set("chunk %llu came twice (expected %u)", static_cast<unsigned long long>(index),
             static_cast<unsigned>(next_index_));
    return Err::ChunkDuplicate;
  }
  if (index > next_index_) {
    err->set("chunk %u is missing (got %llu)", static_cast<unsigned>(next_index_),
             static_cast<unsigned long long>(index));
    return Err::ChunkMissing;
  }
  const char* data = i_s + i_n;
  while (*data == ' ') ++data;
  size_t got = 0;
  Err e = base64_decode(data, strlen(data), body_ + received_, expected_len_ - received_, &got);
  if (e == Err::BufferTooSmall) {
    err->set("chunk %u runs past the announced %u bytes", static_cast<unsigned>(index),
             static_cast<unsigned>(expected_len_));
    return Err::BodyTooLarge;
  }
  if (e != Err::Ok) {
    err->set("chunk %u is not base64 (%u characters; bytes lost on the serial line?)", static_cast<unsigned>(index),
             static_cast<unsigned>(strlen(data)));
    return e;
  }
  received_ += got;
  last_index_ = static_cast<uint32_t>(index);
  ++next_index_;
  return Err::Ok;
}

Err RunReceiver::end(ErrorText* err) {
  if (!active_) {
    err->set("RUN END without RUN BEGIN");
    return Err::OutOfSequence;
  }
  if (received_ != expected_len_) {
    err->set("RUN END after %u of %u bytes (chunk %u missing)", static_cast<unsigned>(received_),
             static_cast<unsigned>(expected_len_), static_cast<unsigned>(next_index_));
    return Err::LengthMismatch;
  }
  uint32_t crc = crc32(body_, received_);
  if (crc != expected_crc_) {
    err->set("RUN body CRC-32 is %08x, RUN BEGIN announced %08x", static_cast<unsigned>(crc),
             static_cast<unsigned>(expected_crc_));
    return Err::CrcMismatch;
  }
  body_[received_] = 0;
  active_ = false;
  return Err::Ok;
}

Err RunReceiver::feed(const char* args, Step* step, ErrorText* err) {
  *step = Step::None;
  const char* rest = args;
  while (*rest != '\0' && *rest != ' ') ++rest;
  const size_t n = static_cast<size_t>(rest - args);
  Err e;
  Step ok_step;
  if (n == strlen(kRunBegin) && strncmp(args, kRunBegin, n) == 0) {
    e = begin(rest, err);
    ok_step = Step::AckBegin;
  } else if (n == strlen(kRunChunk) && strncmp(args, kRunChunk, n) == 0) {
    e = chunk(rest, err);
    ok_step = Step::AckChunk;
  } else if (n == strlen(kRunEnd) && strncmp(args, kRunEnd, n) == 0) {
    e = end(err);
    ok_step = Step::Complete;
  } else if (n == strlen(kRunAbort) && strncmp(args, kRunAbort, n) == 0) {
    reset();
    *step = Step::Aborted;
    return Err::Ok;
  } else {
    err->set("unknown RUN sub-command \"%.*s\" (BEGIN, CHUNK, END, ABORT)", static_cast<int>(n < 16 ? n : 16), args);
    e = Err::UnknownCommand;
    ok_step = Step::None;
  }
  if (e != Err::Ok) {
    reset();
    return e;
  }
  *step = ok_step;
  return Err::Ok;
}

}  // namespace proto
}  // namespace tb
