#include "options.h"
#include "host_util.h"

#include <cmath>
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
  if (o.transport == "tls" && o.ca.empty()) {
    *error = "--transport tls needs --ca FILE (the CA that signed the broker certificate)";
    return false;
  }
  if (o.cert.empty() != o.key.empty()) {
    *error = "mutual TLS needs both --cert and --key";
    return false;
  }
  if (o.topic_alias && o.mqtt_level != 5) {
    *error = "--topic-alias on needs --mqtt 5 (topic aliases are MQTT 5's)";
    return false;
  }
  if (o.reconnect_base_ms > o.reconnect_cap_ms) {
    *error = "--reconnect-base-ms must not be above --reconnect-cap-ms";
    return false;
  }
  if (o.has_password && !o.has_username) {
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

bool options_from(const Values& v, Options* o, std::string* error) {
  o->values = v;
  o->host = v.text(Id::host);
  o->transport = v.text(Id::transport);
  o->port = v.given(Id::port) ? static_cast<uint16_t>(v.uint(Id::port)) : o->transport == "tls" ? 8883 : 1883;
  o->ciphers = v.text(Id::ciphers);
  o->ca = v.text(Id::ca);
  o->server_name = v.text(Id::server_name);
  o->cert = v.text(Id::cert);
  o->key = v.text(Id::key);
  o->username = v.text(Id::username);
  o->has_username = v.given(Id::username);
  o->password = v.text(Id::password);
  o->has_password = v.given(Id::password);
  if (v.given(Id::password_file)) {
    if (o->has_password) {
      *error = "--password and --password-file: give one of them";
      return false;
    }
    if (!read_password_file(v.text(Id::password_file), &o->password, error)) return false;
    o->has_password = true;
  }
  o->payload = static_cast<uint32_t>(v.uint(Id::payload));
  o->samples = static_cast<uint32_t>(v.uint(Id::samples));
  o->interval_us = static_cast<uint64_t>(std::llround(v.decimal(Id::interval_ms) * 1000.0));
  o->qos = static_cast<uint8_t>(v.uint(Id::qos));
  o->device_id = v.text(Id::device_id);
  o->topic = v.text(Id::topic);
  o->client_id = v.given(Id::client_id) ? v.text(Id::client_id) : "vdevice-" + o->device_id;
  o->keylog = v.text(Id::keylog);
  o->send_log = v.text(Id::send_log);
  o->summary = v.text(Id::summary);
  o->seed = v.uint(Id::seed);
  o->connect_timeout_ms = static_cast<uint32_t>(v.uint(Id::connect_timeout_ms));
  tb::parse_connection_mode(v.text(Id::connection), &o->connection);
  o->per_connection = static_cast<uint32_t>(v.uint(Id::per_connection));
  o->sleep_us = static_cast<uint64_t>(std::llround(v.decimal(Id::sleep_ms) * 1000.0));
  tb::parse_close_mode(v.text(Id::close), &o->close);
  o->connections_log = v.text(Id::connections_log);
  o->mqtt_level = std::string(v.text(Id::mqtt)) == "5" ? 5 : 4;
  o->clean_session = std::string(v.text(Id::session)) != "persistent";
  o->session_expiry_s = static_cast<uint32_t>(v.uint(Id::session_expiry_s));
  o->topic_alias = std::string(v.text(Id::topic_alias)) == "on";
  o->inflight = static_cast<uint16_t>(v.uint(Id::inflight));
  o->ack_timeout_ms = static_cast<uint32_t>(v.uint(Id::ack_timeout_ms));
  tb::parse_reconnect_policy(v.text(Id::reconnect), &o->reconnect);
  o->reconnect_base_ms = static_cast<uint32_t>(std::llround(v.decimal(Id::reconnect_base_ms)));
  o->reconnect_cap_ms = static_cast<uint32_t>(std::llround(v.decimal(Id::reconnect_cap_ms)));
  return check_together(*o, error);
}

bool parse_options(int argc, char** argv, Options* out, std::string* error, Mode* mode) {
  Values values;
  if (!parse_args(argc, argv, TB_VDEVICE, "vdevice", &values, mode, error)) return false;
  if (mode->help || mode->describe) return true;
  return options_from(values, out, error);
}

std::string options_help(uint8_t program) {
  std::string out = "All options (lib/testbed_core/src/device_options.def):\n ";
  size_t line = 1;
  for (const Spec& s : tb::opt::kSpecs) {
    if ((s.programs & program) == 0) continue;
    std::string item = " " + flag_name(s);
    if (s.kind == Kind::Uint) item += " " + std::to_string(s.min) + ".." + std::to_string(s.max);
    if (s.kind == Kind::Ms) item += std::string(" ") + s.min_text + ".." + s.max_text;
    if (s.kind == Kind::Enum) item += std::string(" ") + s.choices;
    if (line + item.size() > 110) {
      out += "\n ";
      line = 1;
    }
    out += item;
    line += item.size();
  }
  return out + "\n";
}

std::string usage() {
  return "usage: vdevice [options]   (virtual ESP32: SIMULATED flame + MQ-2 sensors, same core as the firmware)\n"
         "  --host H (127.0.0.1) --port P (1883 plain / 8883 tls) --transport plain|tls\n"
         "  --ciphers LIST (IANA names, comma-separated; default TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)\n"
         "  --ca FILE --server-name NAME --cert FILE --key FILE (mutual TLS) --username U --password P\n"
         "  --password-file FILE (the password is its first line: keeps it off the command line)\n"
         "  --payload BYTES (65) --samples N (200) --interval-ms MS (250) --qos 0|1|2 --device-id ID (v1)\n"
         "  --topic T (testbed/sensors) --client-id ID --keylog FILE --send-log FILE.csv --summary FILE.json\n"
         "  --seed S (1) --connect-timeout-ms MS (10000)\n"
         "  --connection persistent|reconnect|resume-id|resume-ticket (persistent: one connection for the run;\n"
         "      else a connection per K messages, opened at its first message's scheduled time: full TLS\n"
         "      handshakes, or TLS 1.2 resumption by session ID / by session ticket; plain: all as reconnect)\n"
         "  --per-connection K (1; messages per connection, ignored for persistent) --sleep-ms MS (0 = one\n"
         "      interval: from a connection's last message to the next one's first)\n"
         "  --close disconnect|drop (disconnect: MQTT DISCONNECT + close_notify; drop: the socket just closed)\n"
         "  --connections-log FILE.csv (conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,\n"
         "      close,error: one row per connection)\n"
         "  --mqtt 3.1.1|5 --session clean|persistent (persistent: a lost connection is opened again and the\n"
         "      unacknowledged messages sent again with DUP) --session-expiry-s S (3600; MQTT 5)\n"
         "  --topic-alias off|on (MQTT 5) --inflight N (1; QoS 1/2 messages awaiting their ack) --ack-timeout-ms MS\n"
         "  --check: check the options (files read, nothing sent), print ok; --describe-options: the table as JSON\n"
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

tb::Err check_tls(const Options& o, const std::string& ca_pem, std::string* error) {
  if (o.transport != "tls") return tb::Err::Ok;
  uint16_t ids[tb::kMaxCiphers];
  size_t count = 0;
  tb::ErrorText text;
  tb::Err e = tb::parse_cipher_list(o.ciphers.c_str(), ids, tb::kMaxCiphers, &count, &text);
  if (e == tb::Err::Ok) e = tb::check_ciphers_compiled(ids, count, &text);
  *error = text.c_str();
  if (e != tb::Err::Ok) return e;
  mbedtls_x509_crt ca;
  mbedtls_x509_crt_init(&ca);
  const int ret = mbedtls_x509_crt_parse(&ca, reinterpret_cast<const unsigned char*>(ca_pem.c_str()), ca_pem.size() + 1);
  mbedtls_x509_crt_free(&ca);
  if (ret == 0) return tb::Err::Ok;
  *error = "--ca " + o.ca + ": the CA certificate does not parse (mbedTLS " + std::to_string(ret) + ")";
  return tb::Err::TlsCaParse;
}

tb::PublishConfig publish_config(const Options& o) {
  tb::PublishConfig cfg;
  cfg.host = o.host.c_str();
  cfg.port = o.port;
  cfg.device_id = o.device_id.c_str();
  cfg.topic = o.topic.c_str();
  cfg.client_id = o.client_id.c_str();
  cfg.username = o.has_username ? o.username.c_str() : nullptr;
  cfg.password = o.has_password ? o.password.c_str() : nullptr;
  cfg.qos = o.qos;
  cfg.payload_size = o.payload;
  cfg.samples = o.samples;
  cfg.interval_us = o.interval_us;
  cfg.connect_timeout_ms = o.connect_timeout_ms;
  cfg.mode = o.connection;
  cfg.per_connection = o.per_connection;
  cfg.sleep_us = o.sleep_us;
  cfg.close = o.close;
  cfg.mqtt_level = o.mqtt_level;
  cfg.clean_session = o.clean_session;
  cfg.session_expiry_s = o.session_expiry_s;
  cfg.topic_alias = o.topic_alias;
  cfg.inflight = o.inflight;
  cfg.ack_timeout_ms = o.ack_timeout_ms;
  cfg.reconnect = o.reconnect;
  cfg.reconnect_base_ms = o.reconnect_base_ms;
  cfg.reconnect_cap_ms = o.reconnect_cap_ms;
  cfg.reconnect_seed = o.seed;
  return cfg;
}

}  // namespace vdev
