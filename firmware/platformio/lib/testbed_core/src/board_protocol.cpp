#include "board_protocol.h"

#include <cstdio>
#include <cstring>

#include "payload.h"

namespace tb {
namespace proto {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

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

int key_index(const char* key, size_t len) {
  for (size_t i = 0; i < kRunKeyCount; ++i) {
    if (strlen(kRunKeys[i]) == len && strncmp(kRunKeys[i], key, len) == 0) return static_cast<int>(i);
  }
  return -1;
}

// Unescapes value[0..len) in place; returns the new length or -1 for a bad escape.
long unescape(char* value, size_t len) {
  size_t w = 0;
  for (size_t r = 0; r < len; ++r) {
    char c = value[r];
    if (c == '\\') {
      if (++r == len) return -1;
      switch (value[r]) {
        case '\\': c = '\\'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        default: return -1;
      }
    }
    value[w++] = c;
  }
  return static_cast<long>(w);
}

// The body's values by key index (nullptr: absent), NUL-terminated.
struct Values {
  const char* v[kRunKeyCount] = {nullptr};
  const char* get(const char* key) const {
    int i = key_index(key, strlen(key));
    return i >= 0 ? v[i] : nullptr;
  }
};

Err split_body(char* body, size_t len, Values* out, ErrorText* err) {
  size_t pos = 0;
  unsigned line = 0;
  while (pos < len) {
    ++line;
    char* start = body + pos;
    char* nl = static_cast<char*>(memchr(start, '\n', len - pos));
    size_t line_len = nl != nullptr ? static_cast<size_t>(nl - start) : len - pos;
    pos += line_len + 1;
    char* eq = static_cast<char*>(memchr(start, '=', line_len));
    if (eq == nullptr || eq == start || memchr(start, '\0', line_len) != nullptr) {
      err->set("RUN body line %u is not key=value", line);
      return Err::BadEncoding;
    }
    const size_t klen = static_cast<size_t>(eq - start);
    int k = key_index(start, klen);
    if (k < 0) {
      err->set("RUN body key \"%.*s\" is unknown to protocol version %u", static_cast<int>(klen < 40 ? klen : 40),
               start, static_cast<unsigned>(kVersion));
      return Err::UnknownKey;
    }
    if (out->v[k] != nullptr) {
      err->set("RUN body key \"%s\" given twice", kRunKeys[k]);
      return Err::DuplicateKey;
    }
    long vlen = unescape(eq + 1, line_len - klen - 1);
    if (vlen < 0) {
      err->set("RUN body key \"%s\": bad escape (only \\\\ \\n \\r)", kRunKeys[k]);
      return Err::BadEncoding;
    }
    eq[1 + vlen] = '\0';
    out->v[k] = eq + 1;
  }
  return Err::Ok;
}

Err missing(const char* key, const char* why, ErrorText* err) {
  err->set("RUN body key \"%s\" missing%s", key, why);
  return Err::MissingKey;
}

Err bad_value(const char* key, const char* value, const char* expected, ErrorText* err) {
  err->set("RUN body key \"%s\": \"%.48s\" is not %s", key, value, expected);
  return Err::InvalidArgument;
}

// An optional unsigned key in [min, max]; *out keeps its default when the key is absent.
template <typename T>
Err get_uint(const Values& v, const char* key, uint64_t min, uint64_t max, T* out, ErrorText* err) {
  const char* s = v.get(key);
  if (s == nullptr) return Err::Ok;
  uint64_t n = 0;
  if (!parse_uint(s, strlen(s), max, &n) || n < min) {
    char expected[64];
    snprintf(expected, sizeof(expected), "an integer %llu..%llu", static_cast<unsigned long long>(min),
             static_cast<unsigned long long>(max));
    return bad_value(key, s, expected, err);
  }
  *out = static_cast<T>(n);
  return Err::Ok;
}

bool valid_run_id(const char* s) {
  size_t n = strlen(s);
  if (n == 0 || n > kMaxRunId) return false;
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    bool ok = is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Err check_required(const Values& v, ErrorText* err) {
  static const char* const kRequired[] = {"id", "host", "port", "transport", "payload", "samples", "interval_us",
                                          "qos"};
  for (const char* key : kRequired) {
    if (v.get(key) == nullptr) return missing(key, "", err);
  }
  return Err::Ok;
}

Err apply_transport(const Values& v, RunRequest* r, ErrorText* err) {
  const char* t = v.get("transport");
  if (strcmp(t, "tls") == 0) {
    r->tls = true;
  } else if (strcmp(t, "plain") != 0) {
    return bad_value("transport", t, "plain or tls", err);
  }
  r->ciphers = v.get("ciphers");
  r->ca_pem = v.get("ca");
  r->cert_pem = v.get("cert");
  r->key_pem = v.get("key");
  r->server_name = v.get("server_name");
  if (r->tls) {
    if (r->ca_pem == nullptr) return missing("ca", " (transport=tls)", err);
    if (r->ciphers == nullptr) return missing("ciphers", " (transport=tls)", err);
    if ((r->cert_pem == nullptr) != (r->key_pem == nullptr)) {
      return missing(r->cert_pem == nullptr ? "cert" : "key", " (cert and key go together)", err);
    }
    return Err::Ok;
  }
  static const char* const kTlsOnly[] = {"ciphers", "ca", "cert", "key", "server_name"};
  for (const char* key : kTlsOnly) {
    if (v.get(key) != nullptr) {
      err->set("RUN body key \"%s\" only goes with transport=tls", key);
      return Err::InvalidArgument;
    }
  }
  return Err::Ok;
}

Err apply_sync(const Values& v, RunRequest* r, ErrorText* err) {
  r->sync_host = v.get("sync_host");
  if (r->sync_host == nullptr) {
    if (v.get("sync_port") != nullptr || v.get("sync_count") != nullptr) {
      return missing("sync_host", " (sync_port/sync_count need it)", err);
    }
    return Err::Ok;
  }
  if (r->sync_host[0] == '\0') return bad_value("sync_host", "", "a host name or address", err);
  if (v.get("sync_port") == nullptr) return missing("sync_port", " (sync_host needs it)", err);
  Err e = get_uint(v, "sync_port", 1, 65535, &r->sync_port, err);
  if (e != Err::Ok) return e;
  return get_uint(v, "sync_count", 1, kMaxSyncCount, &r->sync_count, err);
}

Err apply_strings(const Values& v, RunRequest* r, ErrorText* err) {
  r->id = v.get("id");
  if (!valid_run_id(r->id)) return bad_value("id", r->id, "1..63 characters of [A-Za-z0-9_.-]", err);
  r->host = v.get("host");
  if (r->host[0] == '\0') return bad_value("host", "", "a host name or address", err);
  r->username = v.get("username");
  r->password = v.get("password");
  r->device_id = v.get("device_id");
  if (r->device_id != nullptr && !valid_device_id(r->device_id)) {
    return bad_value("device_id", r->device_id, "1..32 characters of [A-Za-z0-9_.-]", err);
  }
  r->topic = v.get("topic");
  if (r->topic != nullptr && r->topic[0] == '\0') return bad_value("topic", "", "a topic name", err);
  r->client_id = v.get("client_id");
  const char* mode = v.get("mode");
  if (mode != nullptr) {
    if (strcmp(mode, kModePersistent) != 0) {
      err->set("RUN body key \"mode\": \"%.48s\" is unknown to protocol version %u (known: %s)", mode,
               static_cast<unsigned>(kVersion), kModePersistent);
      return Err::UnsupportedMode;
    }
    r->mode = kModePersistent;
  }
  return Err::Ok;
}

Err apply_numbers(const Values& v, RunRequest* r, ErrorText* err) {
  Err e = get_uint(v, "port", 1, 65535, &r->port, err);
  if (e == Err::Ok) e = get_uint(v, "payload", 1, kMaxPayload, &r->payload, err);
  if (e == Err::Ok) e = get_uint(v, "samples", 1, 10000000, &r->samples, err);
  if (e == Err::Ok) e = get_uint(v, "interval_us", 0, 3600000000ULL, &r->interval_us, err);
  if (e == Err::Ok) e = get_uint(v, "qos", 0, 1, &r->qos, err);
  uint8_t keylog = 0;
  if (e == Err::Ok) e = get_uint(v, "keylog", 0, 1, &keylog, err);
  r->keylog = keylog != 0;
  if (e == Err::Ok) e = get_uint(v, "connect_timeout_ms", 1, 600000, &r->connect_timeout_ms, err);
  return e;
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

Err parse_run_body(char* body, size_t len, RunRequest* out, ErrorText* err) {
  *out = RunRequest();
  Values v;
  Err e = split_body(body, len, &v, err);
  if (e == Err::Ok) e = check_required(v, err);
  if (e == Err::Ok) e = apply_strings(v, out, err);
  if (e == Err::Ok) e = apply_numbers(v, out, err);
  if (e == Err::Ok) e = apply_transport(v, out, err);
  if (e == Err::Ok) e = apply_sync(v, out, err);
  return e;
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
