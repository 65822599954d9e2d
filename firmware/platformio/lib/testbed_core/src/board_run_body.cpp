// The RUN body (board_protocol.h): `key=value` lines, unescaped in place, checked key by key.
#include <cstdio>
#include <cstring>

#include "board_parse.h"
#include "board_protocol.h"
#include "payload.h"

namespace tb {
namespace proto {
namespace {

using detail::is_digit;
using detail::parse_uint;

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
  return Err::Ok;
}

// mode, per_connection, close (connection_mode.h).
Err apply_connection(const Values& v, RunRequest* r, ErrorText* err) {
  const char* mode = v.get("mode");
  if (mode != nullptr) {
    if (!parse_connection_mode(mode, &r->connection_mode)) {
      err->set("RUN body key \"mode\": \"%.48s\" is unknown to protocol version %u (known: %s, %s, %s, %s)", mode,
               static_cast<unsigned>(kVersion), kModePersistent, kModeReconnect, kModeResumeId, kModeResumeTicket);
      return Err::UnsupportedMode;
    }
    r->mode = connection_mode_name(r->connection_mode);
  }
  const char* close = v.get("close");
  if (close != nullptr && !parse_close_mode(close, &r->close)) {
    return bad_value("close", close, "disconnect or drop", err);
  }
  return get_uint(v, "per_connection", 1, kMaxPerConnection, &r->per_connection, err);
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

Err parse_run_body(char* body, size_t len, RunRequest* out, ErrorText* err) {
  *out = RunRequest();
  Values v;
  Err e = split_body(body, len, &v, err);
  if (e == Err::Ok) e = check_required(v, err);
  if (e == Err::Ok) e = apply_strings(v, out, err);
  if (e == Err::Ok) e = apply_connection(v, out, err);
  if (e == Err::Ok) e = apply_numbers(v, out, err);
  if (e == Err::Ok) e = apply_transport(v, out, err);
  if (e == Err::Ok) e = apply_sync(v, out, err);
  return e;
}

}  // namespace proto
}  // namespace tb
