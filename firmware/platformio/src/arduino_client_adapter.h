// Arduino's Client as the core's tb::ByteClient (lib/testbed_core/src/client_transport.h), and the
// env esp32dev-wificlientsecure's TransportFilter: every TLS RUN publishes through WiFiClientSecure
// (NetworkClientSecure in Arduino-ESP32 3.x, which keeps the WiFiClientSecure name) instead of the core's
// TlsTransport; plain RUNs keep the core's PlainTcp. Board code, so it lives in src/, not in the core.
//
// WiFiClientSecure has no cipher-suite API: it offers mbedTLS's default list, which this env's build
// replaces by TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 alone (include/mbedtls_chacha_only.h). A RUN
// asking for anything else is refused at connect, by name. It has no key-log hook either: the RUN's
// keylog=1 gets no KEYLOG lines, and the HANDSHAKE line's tls_ms is the whole connect() (TCP + TLS).
#pragma once

#include <Arduino.h>
#include <Client.h>
#include <WiFi.h>
#include <WiFiClientSecure.h>
#include <mbedtls/ssl.h>

#include <cstring>

#include "board_session.h"
#include "client_transport.h"
#include "tls_transport.h"

// Any Arduino Client (WiFiClient, EthernetClient, ...): Client::connect(host, port) has no timeout.
class ArduinoClientAdapter : public tb::ByteClient {
 public:
  explicit ArduinoClientAdapter(Client& client) : client_(client) {}
  int connect(const char* host, uint16_t port, uint32_t) override { return client_.connect(host, port); }
  size_t write(const uint8_t* data, size_t len) override { return client_.write(data, len); }
  int available() override { return client_.available(); }
  int read(uint8_t* buf, size_t len) override { return client_.read(buf, len); }
  void stop() override { client_.stop(); }
  bool connected() override { return client_.connected() != 0; }

 private:
  Client& client_;
};

// WiFiClientSecure with access to its mbedTLS context (a protected member: a raw pointer in 2.x, a
// shared_ptr in 3.x; both take ->), to report the negotiated version and suite.
class InspectableClientSecure : public WiFiClientSecure {
 public:
  const mbedtls_ssl_context* ssl() const { return sslclient ? &sslclient->ssl_ctx : nullptr; }
};

class SecureClientAdapter : public ArduinoClientAdapter {
 public:
  static constexpr const char* kOnlySuite = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256";

  SecureClientAdapter() : ArduinoClientAdapter(client_) {}
  void configure(const tb::TlsOptions& tls) { tls_ = tls; }

  int connect(const char* host, uint16_t port, uint32_t timeout_ms) override {
    error_[0] = '\0';
    if (tls_.ciphers == nullptr || strcmp(tls_.ciphers, kOnlySuite) != 0) {
      snprintf(error_, sizeof(error_), "this build's WiFiClientSecure offers only %s (mbedtls_chacha_only.h), the "
               "RUN asked for %s", kOnlySuite, tls_.ciphers != nullptr ? tls_.ciphers : "none");
      return 0;
    }
    IPAddress ip;
    if (!ip.fromString(host) && WiFi.hostByName(host, ip) != 1) {
      snprintf(error_, sizeof(error_), "DNS lookup of %s failed", host);
      return 0;
    }
    client_.setHandshakeTimeout((timeout_ms + 999) / 1000);  // seconds
    const char* name = tls_.server_name != nullptr ? tls_.server_name : host;  // SNI and the name verified
    if (client_.connect(ip, port, name, tls_.ca_pem, tls_.client_cert_pem, tls_.client_key_pem) == 1) return 1;
    char text[96];
    const int code = client_.lastError(text, sizeof(text));
    snprintf(error_, sizeof(error_), "WiFiClientSecure: %s (mbedTLS -0x%04x)", text, static_cast<unsigned>(-code));
    return 0;
  }
  bool secure() const override { return true; }
  void describe(tb::TransportStats* stats) const override {
    const mbedtls_ssl_context* ssl = client_.ssl();
    if (ssl == nullptr) return;
    snprintf(stats->tls_version, sizeof(stats->tls_version), "%s", mbedtls_ssl_get_version(ssl));
    // mbedTLS names the suite TLS-ECDHE-...; the testbed uses the IANA name TLS_ECDHE_...
    snprintf(stats->cipher_suite, sizeof(stats->cipher_suite), "%s", mbedtls_ssl_get_ciphersuite(ssl));
    for (char* c = stats->cipher_suite; *c != '\0'; ++c) {
      if (*c == '-') *c = '_';
    }
    stats->cipher_id = tb::cipher_id_from_iana(stats->cipher_suite, strlen(stats->cipher_suite));
  }
  const char* last_error() const override { return error_; }

 private:
  InspectableClientSecure client_;
  tb::TlsOptions tls_;
  char error_[192] = {0};
};

class WifiClientSecureFilter : public tb::TransportFilter {
 public:
  explicit WifiClientSecureFilter(tb::Clock& clock) : transport_(adapter_, clock) {}
  tb::Transport* attach(tb::Transport& inner) override {
    const tb::TlsOptions* tls = inner.tls_options();
    if (tls == nullptr) return nullptr;  // plain TCP: the core's PlainTcp, as in every env
    adapter_.configure(*tls);
    return &transport_;
  }
  void detach() override { transport_.close(); }

 private:
  SecureClientAdapter adapter_;
  tb::ClientTransport transport_;
};
