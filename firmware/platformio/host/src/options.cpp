#include "options.h"
#include "host_util.h"

#include <getopt.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace vdev {
namespace {

enum OptId {
  kHost = 1000, kPort, kTransport, kCiphers, kCa, kServerName, kCert, kKey, kUsername, kPassword, kPayload,
  kSamples, kIntervalMs, kQos, kDeviceId, kTopic, kClientId, kKeylog, kSendLog, kSummary, kSeed,
  kConnectTimeoutMs, kConnection, kPerConnection, kClose, kConnectionsLog, kHelp,
};

struct Spec {
  const char* flag;
  const char* env;
  int id;
};

const Spec kSpecs[] = {
    {"host", "TESTBED_HOST", kHost},
    {"port", "TESTBED_PORT", kPort},
    {"transport", "TESTBED_TRANSPORT", kTransport},
    {"ciphers", "TESTBED_CIPHERS", kCiphers},
    {"ca", "TESTBED_CA", kCa},
    {"server-name", "TESTBED_SERVER_NAME", kServerName},
    {"cert", "TESTBED_CERT", kCert},
    {"key", "TESTBED_KEY", kKey},
    {"username", "TESTBED_USERNAME", kUsername},
    {"password", "TESTBED_PASSWORD", kPassword},
    {"payload", "TESTBED_PAYLOAD", kPayload},
    {"samples", "TESTBED_SAMPLES", kSamples},
    {"interval-ms", "TESTBED_INTERVAL_MS", kIntervalMs},
    {"qos", "TESTBED_QOS", kQos},
    {"device-id", "TESTBED_DEVICE_ID", kDeviceId},
    {"topic", "TESTBED_TOPIC", kTopic},
    {"client-id", "TESTBED_CLIENT_ID", kClientId},
    {"keylog", "TESTBED_KEYLOG", kKeylog},
    {"send-log", "TESTBED_SEND_LOG", kSendLog},
    {"summary", "TESTBED_SUMMARY", kSummary},
    {"seed", "TESTBED_SEED", kSeed},
    {"connect-timeout-ms", "TESTBED_CONNECT_TIMEOUT_MS", kConnectTimeoutMs},
    {"connection", "TESTBED_CONNECTION", kConnection},
    {"per-connection", "TESTBED_PER_CONNECTION", kPerConnection},
    {"close", "TESTBED_CLOSE", kClose},
    {"connections-log", "TESTBED_CONNECTIONS_LOG", kConnectionsLog},
};

// The connection lifecycle options (connection_mode.h).
bool apply_connection(Options* o, int id, const char* name, const char* value, std::string* error) {
  uint64_t v = 0;
  switch (id) {
    case kConnection:
      if (tb::parse_connection_mode(value, &o->connection)) return true;
      *error = std::string(name) + ": expected persistent, reconnect, resume-id or resume-ticket, got \"" + value + "\"";
      return false;
    case kPerConnection:
      if (parse_uint(value, 100000000, &v) && v >= 1) {
        o->per_connection = static_cast<uint32_t>(v);
        return true;
      }
      *error = std::string(name) + ": expected an integer 1..100000000, got \"" + value + "\"";
      return false;
    case kClose:
      if (tb::parse_close_mode(value, &o->close)) return true;
      *error = std::string(name) + ": expected disconnect or drop, got \"" + value + "\"";
      return false;
    case kConnectionsLog: o->connections_log = value; return true;
    default: return false;
  }
}

bool apply(Options* o, int id, const char* name, const char* value, std::string* error) {
  uint64_t v = 0;
  auto number = [&](uint64_t min, uint64_t max) {
    if (!parse_uint(value, max, &v) || v < min) {
      *error = std::string(name) + ": expected an integer " + std::to_string(min) + ".." + std::to_string(max) +
               ", got \"" + value + "\"";
      return false;
    }
    return true;
  };
  switch (id) {
    case kHost: o->host = value; break;
    case kPort: if (!number(1, 65535)) return false; o->port = static_cast<uint16_t>(v); break;
    case kTransport:
      if (strcmp(value, "plain") != 0 && strcmp(value, "tls") != 0) {
        *error = std::string(name) + ": expected plain or tls, got \"" + value + "\"";
        return false;
      }
      o->transport = value;
      break;
    case kCiphers: o->ciphers = value; break;
    case kCa: o->ca = value; break;
    case kServerName: o->server_name = value; break;
    case kCert: o->cert = value; break;
    case kKey: o->key = value; break;
    case kUsername: o->username = value; o->has_username = true; break;
    case kPassword: o->password = value; o->has_password = true; break;
    case kPayload: if (!number(1, 1u << 20)) return false; o->payload = static_cast<uint32_t>(v); break;
    case kSamples: if (!number(1, 100000000)) return false; o->samples = static_cast<uint32_t>(v); break;
    case kIntervalMs: {
      // Milliseconds, decimals and exponents allowed ("250", "0.5", "3.6e+06").
      errno = 0;
      char* end = nullptr;
      double ms = strtod(value, &end);
      if (errno != 0 || end == value || *end != '\0' || !std::isfinite(ms) || ms < 0 || ms > 86400000.0) {
        *error = std::string(name) + ": expected milliseconds 0..86400000 (decimals allowed), got \"" + value + "\"";
        return false;
      }
      o->interval_us = static_cast<uint64_t>(std::llround(ms * 1000.0));
      break;
    }
    case kQos: if (!number(0, 1)) return false; o->qos = static_cast<uint8_t>(v); break;
    case kDeviceId: o->device_id = value; break;
    case kTopic: o->topic = value; break;
    case kClientId: o->client_id = value; break;
    case kKeylog: o->keylog = value; break;
    case kSendLog: o->send_log = value; break;
    case kSummary: o->summary = value; break;
    case kSeed: if (!number(0, UINT64_MAX)) return false; o->seed = v; break;
    case kConnectTimeoutMs:
      if (!number(1, 3600000)) return false;
      o->connect_timeout_ms = static_cast<uint32_t>(v);
      break;
    default: return apply_connection(o, id, name, value, error);
  }
  return true;
}

}  // namespace

const char* usage() {
  return "usage: vdevice [options]   (virtual ESP32: SIMULATED flame + MQ-2 sensors, same core as the firmware)\n"
         "  --host H (127.0.0.1) --port P (1883 plain / 8883 tls) --transport plain|tls\n"
         "  --ciphers LIST (IANA names, comma-separated; default TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)\n"
         "  --ca FILE --server-name NAME --cert FILE --key FILE (mutual TLS) --username U --password P\n"
         "  --payload BYTES (65) --samples N (200) --interval-ms MS (1000) --qos 0|1 --device-id ID (v1)\n"
         "  --topic T (testbed/sensors) --client-id ID --keylog FILE --send-log FILE.csv --summary FILE.json\n"
         "  --seed S (1) --connect-timeout-ms MS (10000)\n"
         "  --connection persistent|reconnect|resume-id|resume-ticket (persistent: one connection for the run;\n"
         "      else a connection per K messages, opened at its first message's scheduled time: full TLS\n"
         "      handshakes, or TLS 1.2 resumption by session ID / by session ticket; plain: all as reconnect)\n"
         "  --per-connection K (1; messages per connection, ignored for persistent)\n"
         "  --close disconnect|drop (disconnect: MQTT DISCONNECT + close_notify; drop: the socket just closed)\n"
         "  --connections-log FILE.csv (conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,\n"
         "      close,error: one row per connection)\n"
         "Every option X-Y can also be given as environment variable TESTBED_X_Y; flags win.\n";
}

bool parse_options(int argc, char** argv, Options* out, std::string* error, bool* help) {
  *help = false;
  for (const Spec& s : kSpecs) {
    const char* v = getenv(s.env);
    if (v != nullptr && *v != '\0' && !apply(out, s.id, s.env, v, error)) return false;
  }
  option longopts[sizeof(kSpecs) / sizeof(kSpecs[0]) + 2];
  size_t n = 0;
  for (const Spec& s : kSpecs) longopts[n++] = option{s.flag, required_argument, nullptr, s.id};
  longopts[n++] = option{"help", no_argument, nullptr, kHelp};
  longopts[n] = option{nullptr, 0, nullptr, 0};
  opterr = 0;
  optind = 1;
  while (true) {
    int idx = 0;
    int c = getopt_long(argc, argv, "h", longopts, &idx);
    if (c == -1) break;
    if (c == kHelp || c == 'h') {
      *help = true;
      return true;
    }
    if (c == '?' || c == ':') {
      const char* bad = (optind - 1 < argc && optind > 0) ? argv[optind - 1] : "?";
      *error = std::string("unknown option or missing value: ") + bad;
      return false;
    }
    std::string name = std::string("--") + longopts[idx].name;
    if (!apply(out, c, name.c_str(), optarg, error)) return false;
  }
  if (optind < argc) {
    *error = std::string("unexpected argument: ") + argv[optind];
    return false;
  }
  if (out->port == 0) out->port = out->transport == "tls" ? 8883 : 1883;
  if (out->client_id.empty()) out->client_id = "vdevice-" + out->device_id;
  if (out->transport == "tls" && out->ca.empty()) {
    *error = "--transport tls needs --ca FILE (the CA that signed the broker certificate)";
    return false;
  }
  if (out->cert.empty() != out->key.empty()) {
    *error = "mutual TLS needs both --cert and --key";
    return false;
  }
  if (out->has_password && !out->has_username) {
    *error = "--password needs --username (MQTT 3.1.1 section 3.1.2.9)";
    return false;
  }
  return true;
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
  cfg.close = o.close;
  return cfg;
}

}  // namespace vdev
