// client_transport_probe: publishes through the core's ClientTransport (lib/testbed_core/src/
// client_transport.h), the Transport the ESP32 env esp32dev-wificlientsecure builds over WiFiClientSecure,
// here over the host stand-in client (transport_byte_client.h: the core's TlsTransport or PlainTcp as the
// Client). tests/firmware/test_client_transport.py runs it against a real Mosquitto.
//   client_transport_probe --host 127.0.0.1 --port N [--transport tls|plain] [--ca FILE] [--server-name NAME]
//                          [--ciphers IANA,...] [--samples 20] [--payload 65] [--interval-ms 20] [--qos 0|1]
// stdout: "MSG seq=<n> t_send_us=<us> bytes=<payload>" per message, then "DONE sent=<n> secure=<0|1>
// tls_version=<v|-> cipher_suite=<name|-> handshake_ms=<ms|-> tcp_ms=<ms|->".
// Exit 0, 1 (one stderr line "client_transport_probe: error <ErrName>: <message>") or 2 (bad options).
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "client_transport.h"
#include "host_util.h"
#include "plain_tcp.h"
#include "posix_clock.h"
#include "publisher.h"
#include "sim_sensors.h"
#include "tls_transport.h"
#include "transport_byte_client.h"

namespace {

struct Options {
  std::string host = "127.0.0.1";
  uint64_t port = 0;
  bool tls = true;
  std::string ca;
  std::string server_name = "localhost";
  std::string ciphers = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256";
  uint64_t samples = 20, payload = 65, interval_ms = 20, qos = 0;
};

class PrintObserver : public tb::SendObserver {
 public:
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t, int64_t) override {
    printf("MSG seq=%u t_send_us=%" PRId64 " bytes=%zu\n", static_cast<unsigned>(seq), t_send_us, payload_bytes);
    return true;
  }
};

int usage(const char* why) {
  fprintf(stderr,
          "client_transport_probe: %s\nusage: client_transport_probe --host H --port N [--transport tls|plain] "
          "[--ca FILE]\n    [--server-name NAME] [--ciphers IANA,...] [--samples N] [--payload B] "
          "[--interval-ms MS] [--qos 0|1]\n",
          why);
  return 2;
}

bool parse(int argc, char** argv, Options* o) {
  if (argc % 2 != 1) return false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    bool ok = true;
    if (k == "--host") o->host = v;
    else if (k == "--ca") o->ca = v;
    else if (k == "--server-name") o->server_name = v;
    else if (k == "--ciphers") o->ciphers = v;
    else if (k == "--transport") ok = (o->tls = strcmp(v, "tls") == 0) || strcmp(v, "plain") == 0;
    else if (k == "--port") ok = vdev::parse_uint(v, 65535, &o->port) && o->port > 0;
    else if (k == "--samples") ok = vdev::parse_uint(v, 1000000, &o->samples) && o->samples > 0;
    else if (k == "--payload") ok = vdev::parse_uint(v, 4096, &o->payload) && o->payload > 0;
    else if (k == "--interval-ms") ok = vdev::parse_uint(v, 3600000, &o->interval_ms);
    else if (k == "--qos") ok = vdev::parse_uint(v, 1, &o->qos);
    else return false;
    if (!ok) return false;
  }
  return o->port > 0 && (!o->tls || !o->ca.empty());
}

const char* or_dash(const char* s) { return s[0] != '\0' ? s : "-"; }

std::string ms_or_dash(int64_t us) {
  if (us < 0) return "-";
  char b[32];
  snprintf(b, sizeof(b), "%.3f", static_cast<double>(us) / 1000.0);
  return b;
}

int publish(const Options& o, tb::Transport& inner) {
  vdev::PosixClock clock;
  vdev::TransportByteClient client(inner, o.tls);
  tb::ClientTransport transport(client, clock);
  vdev::SimulatedSensors sensors(7);
  PrintObserver observer;
  static tb::Publisher publisher(transport, clock, sensors, observer);  // ~10 KB of buffers: static
  tb::PublishConfig cfg{tb::DeviceConfig()};  // device_options.def's defaults, then this probe's own
  cfg.host = o.host.c_str();
  cfg.port = static_cast<uint16_t>(o.port);
  cfg.client_id = "v1-client";
  cfg.qos = static_cast<uint8_t>(o.qos);
  cfg.payload_size = static_cast<size_t>(o.payload);
  cfg.samples = static_cast<uint32_t>(o.samples);
  cfg.interval_us = o.interval_ms * 1000;
  cfg.drain_timeout_ms = 10000;
  tb::RunStats stats;
  tb::Err e = publisher.validate(cfg);
  if (e == tb::Err::Ok) e = publisher.run(cfg, &stats);
  if (e != tb::Err::Ok) {
    fprintf(stderr, "client_transport_probe: error %s: %s\n", tb::err_name(e), publisher.error_text());
    return 1;
  }
  const tb::TransportStats& ts = transport.stats();
  printf("DONE sent=%u secure=%d tls_version=%s cipher_suite=%s handshake_ms=%s tcp_ms=%s\n",
         static_cast<unsigned>(stats.messages_sent), o.tls ? 1 : 0, or_dash(ts.tls_version),
         or_dash(ts.cipher_suite), ms_or_dash(stats.handshake_us).c_str(), ms_or_dash(stats.tcp_connect_us).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--help") == 0) {
    usage("MQTT publishes through the core's ClientTransport over a stand-in Client");
    return 0;
  }
  Options o;
  if (!parse(argc, argv, &o)) return usage("bad options");
  vdev::PosixClock clock;
  if (!o.tls) {
    tb::PlainTcp tcp(clock);
    return publish(o, tcp);
  }
  std::string ca, error;
  if (!vdev::read_file(o.ca, "CA", &ca, &error)) {
    fprintf(stderr, "client_transport_probe: error TlsCaParse: %s\n", error.c_str());
    return 1;
  }
  tb::TlsOptions tls;
  tls.ca_pem = ca.c_str();
  tls.server_name = o.server_name.c_str();
  tls.ciphers = o.ciphers.c_str();
  tb::TlsTransport secure(clock, tls);
  return publish(o, secure);
}
