// The RUN body (board_protocol.h): `key=value` lines, unescaped in place, checked key by key.
#include <cstdio>
#include <cstring>

#include "board_parse.h"
#include "board_protocol.h"
#include "device_config.h"
#include "device_options.h"
#include "payload.h"

namespace tb {
namespace proto {
namespace {

using detail::is_digit;
using detail::parse_uint;

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

using opt::Id;
using opt::Values;

// The board's key called key[0..len) (device_options.def, TB_BOARD), or nullptr.
const opt::Spec* board_key(const char* key, size_t len) { return opt::find(key, len, TB_BOARD, false); }

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
    const opt::Spec* k = board_key(start, klen);
    if (k == nullptr) {
      err->set("RUN body key \"%.*s\" is unknown to protocol version %u", static_cast<int>(klen < 40 ? klen : 40),
               start, static_cast<unsigned>(kVersion));
      return Err::UnknownKey;
    }
    const Id id = opt::id_at(static_cast<size_t>(k - opt::kSpecs));
    if (out->given(id)) {
      err->set("RUN body key \"%s\" given twice", k->name);
      return Err::DuplicateKey;
    }
    long vlen = unescape(eq + 1, line_len - klen - 1);
    if (vlen < 0) {
      err->set("RUN body key \"%s\": bad escape (only \\\\ \\n \\r)", k->name);
      return Err::BadEncoding;
    }
    eq[1 + vlen] = '\0';
    out->set(id, eq + 1);
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

// Every given value against its entry's kind and range (device_options.def), in the table's order. An
// unknown mode is UnsupportedMode: a board flashed before a mode existed answers so, naming the ones it knows.
Err check_values(const Values& v, ErrorText* err) {
  for (size_t i = 0; i < opt::kCount; ++i) {
    const char* s = v.raw(opt::id_at(i));
    if (s == nullptr || opt::valid(opt::kSpecs[i], s)) continue;
    if (opt::id_at(i) == Id::mode) {
      err->set("RUN body key \"mode\": \"%.48s\" is unknown to protocol version %u (known: %s, %s, %s, %s)", s,
               static_cast<unsigned>(kVersion), kModePersistent, kModeReconnect, kModeResumeId, kModeResumeTicket);
      return Err::UnsupportedMode;
    }
    char expected[96];
    opt::expected(opt::kSpecs[i], expected, sizeof(expected));
    return bad_value(opt::kSpecs[i].name, s, expected, err);
  }
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
  for (Id id : kRequiredKeys) {
    if (!v.given(id)) return missing(opt::spec(id).name, "", err);
  }
  return Err::Ok;
}

// What goes together among the transport's keys (check_values has checked each).
Err check_transport(const DeviceConfig& r, ErrorText* err) {
  if (strcmp(r.transport, "tls") == 0) {
    if (!r.given(Id::ca)) return missing("ca", " (transport=tls)", err);
    if (!r.given(Id::ciphers)) return missing("ciphers", " (transport=tls)", err);
    if (r.given(Id::cert) != r.given(Id::key)) {
      return missing(r.given(Id::cert) ? "key" : "cert", " (cert and key go together)", err);
    }
    return Err::Ok;
  }
  static const Id kTlsOnly[] = {Id::ciphers, Id::ca, Id::cert, Id::key, Id::server_name};
  for (Id id : kTlsOnly) {
    if (r.given(id)) {
      err->set("RUN body key \"%s\" only goes with transport=tls", opt::spec(id).name);
      return Err::InvalidArgument;
    }
  }
  return Err::Ok;
}

Err check_sync(const DeviceConfig& r, ErrorText* err) {
  if (!r.given(Id::sync_host)) {
    if (r.given(Id::sync_port) || r.given(Id::sync_count)) {
      return missing("sync_host", " (sync_port/sync_count need it)", err);
    }
    return Err::Ok;
  }
  if (r.sync_host[0] == '\0') return bad_value("sync_host", "", "a host name or address", err);
  if (!r.given(Id::sync_port)) return missing("sync_port", " (sync_host needs it)", err);
  return Err::Ok;
}

Err check_strings(const DeviceConfig& r, ErrorText* err) {
  if (!valid_run_id(r.id)) return bad_value("id", r.id, "1..63 characters of [A-Za-z0-9_.-]", err);
  if (r.host[0] == '\0') return bad_value("host", "", "a host name or address", err);
  if (r.given(Id::device_id) && !valid_device_id(r.device_id)) {
    return bad_value("device_id", r.device_id, "1..32 characters of [A-Za-z0-9_.-]", err);
  }
  if (r.given(Id::topic) && r.topic[0] == '\0') return bad_value("topic", "", "a topic name", err);
  return Err::Ok;
}

// keylog (a file on vdevice, Text in the table) is 0|1 here.
Err check_keylog(const DeviceConfig& r, ErrorText* err) {
  uint64_t on = 0;
  if (r.given(Id::keylog) && !parse_uint(r.keylog, strlen(r.keylog), 1, &on)) {
    return bad_value("keylog", r.keylog, "an integer 0..1", err);
  }
  return Err::Ok;
}

// The combination of the MQTT keys (check_values has checked each; vdevice's rule: a topic alias is MQTT 5's).
Err check_mqtt(const DeviceConfig& r, ErrorText* err) {
  if (strcmp(r.topic_alias, "on") == 0 && strcmp(r.mqtt, "5") != 0) {
    err->set("RUN body key \"topic_alias\": on needs mqtt=5 (topic aliases are MQTT 5's)");
    return Err::InvalidArgument;
  }
  return Err::Ok;
}

}  // namespace

bool run_keylog(const DeviceConfig& run) {
  uint64_t on = 0;
  return run.given(Id::keylog) && parse_uint(run.keylog, strlen(run.keylog), 1, &on) && on == 1;
}

Err parse_run_body(char* body, size_t len, DeviceConfig* out, ErrorText* err) {
  Values v;
  Err e = split_body(body, len, &v, err);
  if (e == Err::Ok) e = check_required(v, err);
  if (e == Err::Ok) e = check_values(v, err);
  *out = e == Err::Ok ? DeviceConfig(v, TB_BOARD) : DeviceConfig(TB_BOARD);  // the ONE fill (device_config.h)
  if (e == Err::Ok) e = check_strings(*out, err);
  if (e == Err::Ok) e = check_keylog(*out, err);
  if (e == Err::Ok) e = check_mqtt(*out, err);
  if (e == Err::Ok) e = check_transport(*out, err);
  if (e == Err::Ok) e = check_sync(*out, err);
  return e;
}

}  // namespace proto
}  // namespace tb
