#include "options.h"
#include "host_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cipher_suites.h"
#include "tls_transport.h"
#include "mbedtls/x509_crt.h"

namespace vdev {
namespace {

using tb::opt::Id;
using tb::opt::Kind;
using tb::opt::Spec;
using tb::opt::Values;

std::string env_name(const Spec& s) {
  std::string env = "TESTBED_";
  for (const char* c = s.name; *c != '\0'; ++c) env += static_cast<char>(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
  return env;
}

std::string flag_name(const Spec& s) {
  std::string flag = std::string("--") + s.name;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

// Checks text against s and records it; false with "<name>: expected ..., got "<text>"".
bool take(const Spec& s, const std::string& name, const char* text, Values* values, std::string* error) {
  if (!tb::opt::valid(s, text)) {
    char expected[160];
    tb::opt::expected(s, expected, sizeof(expected));
    *error = name + ": expected " + expected + ", got \"" + text + "\"";
    return false;
  }
  values->set(tb::opt::id_at(static_cast<size_t>(&s - tb::opt::kSpecs)), text);
  return true;
}

// One argv word at argv[*i] (and its value, taking the next word); false with the error.
bool take_arg(int argc, char** argv, int* i, uint8_t program, const char* prog, Values* values, Mode* mode,
              std::string* error) {
  const char* a = argv[*i];
  if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return mode->help = true;
  if (strcmp(a, "--check") == 0) return mode->check = true;
  if (strcmp(a, "--describe-options") == 0) return mode->describe = true;
  if (strcmp(a, "--show-config") == 0) return mode->show = true;
  if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
    *error = std::string(a[0] == '-' ? "unknown option: " : "unexpected argument: ") + a;
    return false;
  }
  const char* eq = strchr(a, '=');
  const size_t len = eq != nullptr ? static_cast<size_t>(eq - a - 2) : strlen(a + 2);
  const Spec* s = tb::opt::find(a + 2, len, program, true);
  const std::string name = "--" + std::string(a + 2, len);
  if (s == nullptr) {
    *error = "unknown option: " + name + " (" + prog + " --help lists its options)";
    return false;
  }
  const char* value = eq != nullptr ? eq + 1 : nullptr;
  if (value == nullptr && s->kind == Kind::Flag) value = "1";
  if (value == nullptr && *i + 1 < argc) value = argv[++*i];
  if (value == nullptr) {
    *error = "missing value: " + name;
    return false;
  }
  return take(*s, name, value, values, error);
}

bool read_password_file(const std::string& path, std::string* password, std::string* error) {
  std::string text;
  if (!read_file(path, "--password-file", &text, error)) return false;
  *password = text.substr(0, text.find('\n'));  // the first line, its newline stripped
  if (!password->empty() && password->back() == '\r') password->pop_back();
  return true;
}

// What must go together among vdevice's options.
bool check_together(const Options& o, std::string* error) {
  const tb::DeviceConfig& c = o.config;
  if (o.tls() && !c.given(Id::ca)) {
    *error = "--transport tls needs --ca FILE (the CA that signed the broker certificate)";
    return false;
  }
  if (c.given(Id::cert) != c.given(Id::key)) {
    *error = "mutual TLS needs both --cert and --key";
    return false;
  }
  if (o.publish.topic_alias && o.publish.mqtt_level != 5) {
    *error = "--topic-alias on needs --mqtt 5 (topic aliases are MQTT 5's)";
    return false;
  }
  if (o.publish.reconnect_base_ms > o.publish.reconnect_cap_ms) {
    *error = "--reconnect-base-ms must not be above --reconnect-cap-ms";
    return false;
  }
  if (o.publish.password != nullptr && o.publish.username == nullptr) {
    *error = "--password needs --username (MQTT 3.1.1 section 3.1.2.9)";
    return false;
  }
  return true;
}

std::string json_number_or_null(const Spec& s, bool max, bool def) {
  if (s.kind == Kind::Uint || s.kind == Kind::Flag) return std::to_string(def ? s.def : max ? s.max : s.min);
  if (s.kind == Kind::Ms) return def ? s.def_text : max ? s.max_text : s.min_text;
  return "null";
}

std::string json_choices(const Spec& s) {
  if (s.kind != Kind::Enum) return "null";
  std::string out = "[";
  std::string word;
  for (const char* c = s.choices;; ++c) {
    if (*c == '|' || *c == '\0') {
      out += (out.size() > 1 ? "," : "") + json_string(word);
      word.clear();
      if (*c == '\0') break;
    } else {
      word += *c;
    }
  }
  return out + "]";
}

std::string json_programs(const Spec& s) {
  std::string out;
  if (s.programs & TB_VDEVICE) out += ",\"vdevice\"";
  if (s.programs & TB_FLEET) out += ",\"fleet\"";
  if (s.programs & TB_BOARD) out += ",\"board\"";
  return "[" + (out.empty() ? out : out.substr(1)) + "]";
}

}  // namespace

bool parse_args(int argc, char** argv, uint8_t program, const char* prog, Values* values, Mode* mode,
                std::string* error) {
  *mode = Mode();
  for (const Spec& s : tb::opt::kSpecs) {
    if ((s.programs & program) == 0) continue;
    const std::string env = env_name(s);
    const char* v = getenv(env.c_str());
    if (v != nullptr && *v != '\0' && !take(s, env, v, values, error)) return false;
  }
  for (int i = 1; i < argc; ++i) {
    if (!take_arg(argc, argv, &i, program, prog, values, mode, error)) return false;
    if (mode->help || mode->describe) return true;
  }
  return true;
}

bool Options::tls() const { return strcmp(config.transport, "tls") == 0; }
bool Options::websocket() const { return strcmp(config.mqtt_transport, "websocket") == 0; }

bool options_from(const Values& v, uint8_t program, Options* o, std::string* error) {
  o->config = tb::DeviceConfig(v, program);  // the core's one fill (device_config.h)
  o->password = v.text(Id::password);
  bool has_password = v.given(Id::password);
  if (v.given(Id::password_file)) {
    if (has_password) {
      *error = "--password and --password-file: give one of them";
      return false;
    }
    if (!read_password_file(v.text(Id::password_file), &o->password, error)) return false;
    has_password = true;
  }
  o->client_id = v.given(Id::client_id) ? v.text(Id::client_id) : std::string("vdevice-") + o->config.device_id;
  o->publish = tb::PublishConfig(o->config);  // the publisher's view; then what vdevice decides itself
  o->publish.client_id = o->client_id.c_str();
  o->publish.password = has_password ? o->password.c_str() : nullptr;
  return check_together(*o, error);
}

bool parse_options(int argc, char** argv, Options* out, std::string* error, Mode* mode) {
  Values values;
  if (!parse_args(argc, argv, TB_VDEVICE, "vdevice", &values, mode, error)) return false;
  if (mode->help || mode->describe) return true;
  return options_from(values, TB_VDEVICE, out, error);
}

namespace {

// An option's range or choices and its default, as --help lists it: " 1..4096 (65)", " plain|tls (plain)",
// " (127.0.0.1)"; nothing for a default outside the range or "" (the program decides, or none).
std::string range_and_default(const Spec& s) {
  std::string out;
  if (s.kind == Kind::Uint) out = " " + std::to_string(s.min) + ".." + std::to_string(s.max);
  if (s.kind == Kind::Ms) out = std::string(" ") + s.min_text + ".." + s.max_text;
  if (s.kind == Kind::Enum) out = std::string(" ") + s.choices;
  if (s.kind == Kind::Uint && s.def >= s.min && s.def <= s.max) return out + " (" + std::to_string(s.def) + ")";
  if (s.kind == Kind::Ms && s.ddef >= s.dmin && s.ddef <= s.dmax) return out + " (" + s.def_text + ")";
  if ((s.kind == Kind::Enum || s.kind == Kind::Text) && *s.def_text != '\0') return out + " (" + s.def_text + ")";
  return out;
}

}  // namespace

std::string options_help(uint8_t program) {
  std::string out = "All options: range or choices, (default) (lib/testbed_core/src/device_options.def):\n ";
  size_t line = 1;
  for (const Spec& s : tb::opt::kSpecs) {
    if ((s.programs & program) == 0) continue;
    const std::string item = " " + flag_name(s) + range_and_default(s);
    if (line + item.size() > 110) {
      out += "\n ";
      line = 1;
    }
    out += item;
    line += item.size();
  }
  return out + "\n";
}

// What each option means; its range or choices and its default only in options_help's list, from the .def
// (tests/firmware/test_usage_defaults.py finds a default, range or choice list written here).
std::string usage() {
  return "usage: vdevice [options]   (virtual ESP32: SIMULATED flame + MQ-2 sensors, same core as the firmware)\n"
         "  --host H --port P (when not given: 1883 plain, 8883 tls) --transport T\n"
         "  --ciphers LIST (IANA names, comma-separated)\n"
         "  --ca FILE --server-name NAME --cert FILE --key FILE (mutual TLS) --username U --password P\n"
         "  --password-file FILE (the password is its first line: keeps it off the command line)\n"
         "  --payload BYTES --samples N --interval-ms MS --qos Q --device-id ID\n"
         "  --topic T --client-id ID --keylog FILE --send-log FILE.csv --summary FILE.json\n"
         "  --seed S --connect-timeout-ms MS\n"
         "  --connection MODE (persistent: one connection for the run; else a connection per K messages, opened at\n"
         "      its first message's scheduled time: full TLS handshakes, or TLS 1.2 resumption by session ID / by\n"
         "      session ticket; plain: all as reconnect)\n"
         "  --per-connection K (messages per connection, ignored for persistent) --sleep-ms MS (from a connection's\n"
         "      last message to the next one's first; 0: one interval)\n"
         "  --close HOW (disconnect: MQTT DISCONNECT + close_notify; drop: the socket just closed)\n"
         "  --connections-log FILE.csv (conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,\n"
         "      close,error: one row per connection)\n"
         "  --mqtt VERSION --session KIND (persistent: a lost connection is opened again and the unacknowledged\n"
         "      messages sent again with DUP) --session-expiry-s S (MQTT 5)\n"
         "  --topic-alias A (MQTT 5) --inflight N (QoS 1/2 messages awaiting their ack) --ack-timeout-ms MS\n"
         "  --check: check the options (files read, nothing sent), print ok; --describe-options: the table as JSON;\n"
         "  --show-config: the configuration these options make, as JSON (every option, given or its default)\n"
         "Every option X-Y can also be given as environment variable TESTBED_X_Y; flags win.\n" +
         options_help(TB_VDEVICE);
}

std::string describe_options() {
  std::string out = "[";
  for (const Spec& s : tb::opt::kSpecs) {
    const bool numeric = s.kind == Kind::Uint || s.kind == Kind::Ms || s.kind == Kind::Flag;
    out += std::string(out.size() > 1 ? ",\n " : "") + "{\"name\":" + json_string(s.name) +
           ",\"kind\":" + json_string(tb::opt::kind_name(s.kind)) + ",\"min\":" + json_number_or_null(s, false, false) +
           ",\"max\":" + json_number_or_null(s, true, false) +
           ",\"default\":" + (numeric ? json_number_or_null(s, false, true) : json_string(s.def_text)) +
           ",\"choices\":" + json_choices(s) + ",\"programs\":" + json_programs(s) + "}";
  }
  return out + "]\n";
}

namespace {

void json_field(const tb::DeviceConfig& c, tb::opt::Id id, const std::string& value, std::string* out) {
  const Spec& s = tb::opt::spec(id);
  if ((s.programs & c.program) == 0) return;
  const bool secret = c.given(id) && (strcmp(s.name, "password") == 0 || strcmp(s.name, "key") == 0);
  *out += std::string(out->size() > 1 ? "," : "") + json_string(s.name) + ":" + (secret ? "\"***\"" : value);
}

std::string json_decimal(double v) {
  char text[40];
  snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

}  // namespace

std::string config_json(const tb::DeviceConfig& c) {
  std::string out = "{";
#define TB_OPT_UINT(n, lo, hi, d) json_field(c, Id::n, std::to_string(c.n), &out);
#define TB_OPT_MS(n, lo, hi, d) json_field(c, Id::n, json_decimal(c.n), &out);
#define TB_OPT_ENUM(n, ch, d) json_field(c, Id::n, json_string(c.n), &out);
#define TB_OPT_TEXT(n, d) json_field(c, Id::n, json_string(c.n), &out);
#define TB_OPT_FLAG(n) json_field(c, Id::n, c.n ? "true" : "false", &out);
#include "device_options.def"
#include "device_options_end.h"
  return out + "}\n";
}

tb::Err check_tls(const Options& o, const std::string& ca_pem, std::string* error) {
  if (!o.tls()) return tb::Err::Ok;
  uint16_t ids[tb::kMaxCiphers];
  size_t count = 0;
  tb::ErrorText text;
  tb::Err e = tb::parse_cipher_list(o.config.ciphers, ids, tb::kMaxCiphers, &count, &text);
  if (e == tb::Err::Ok) e = tb::check_ciphers_compiled(ids, count, &text);
  *error = text.c_str();
  if (e != tb::Err::Ok) return e;
  mbedtls_x509_crt ca;
  mbedtls_x509_crt_init(&ca);
  const int ret = mbedtls_x509_crt_parse(&ca, reinterpret_cast<const unsigned char*>(ca_pem.c_str()), ca_pem.size() + 1);
  mbedtls_x509_crt_free(&ca);
  if (ret == 0) return tb::Err::Ok;
  *error = std::string("--ca ") + o.config.ca + ": the CA certificate does not parse (mbedTLS " + std::to_string(ret) +
           ")";
  return tb::Err::TlsCaParse;
}

}  // namespace vdev
