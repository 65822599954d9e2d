// The NSS key log (the format Wireshark reads) on mbedTLS 2.28 and 3.x.
// 2.28: one per-config callback (mbedtls_ssl_conf_export_keys_ext_cb) gives the TLS 1.2 master secret.
// 3.x: a per-context callback (mbedtls_ssl_set_export_keys_cb, installed again after each session reset)
// gives the TLS 1.2 master secret and each TLS 1.3 traffic secret, each written under its NSS label.
#include <cstdio>

#include "tls_transport.h"

namespace tb {
namespace {

#if defined(TB_MBEDTLS3)
const char* nss_label(mbedtls_ssl_key_export_type type) {
  switch (type) {
    case MBEDTLS_SSL_KEY_EXPORT_TLS12_MASTER_SECRET: return "CLIENT_RANDOM";
#if defined(MBEDTLS_SSL_PROTO_TLS1_3)
    case MBEDTLS_SSL_KEY_EXPORT_TLS1_3_CLIENT_EARLY_SECRET: return "CLIENT_EARLY_TRAFFIC_SECRET";
    case MBEDTLS_SSL_KEY_EXPORT_TLS1_3_EARLY_EXPORTER_SECRET: return "EARLY_EXPORTER_SECRET";
    case MBEDTLS_SSL_KEY_EXPORT_TLS1_3_CLIENT_HANDSHAKE_TRAFFIC_SECRET: return "CLIENT_HANDSHAKE_TRAFFIC_SECRET";
    case MBEDTLS_SSL_KEY_EXPORT_TLS1_3_SERVER_HANDSHAKE_TRAFFIC_SECRET: return "SERVER_HANDSHAKE_TRAFFIC_SECRET";
    case MBEDTLS_SSL_KEY_EXPORT_TLS1_3_CLIENT_APPLICATION_TRAFFIC_SECRET: return "CLIENT_TRAFFIC_SECRET_0";
    case MBEDTLS_SSL_KEY_EXPORT_TLS1_3_SERVER_APPLICATION_TRAFFIC_SECRET: return "SERVER_TRAFFIC_SECRET_0";
#endif
    default: return nullptr;
  }
}
#endif

}  // namespace

void keylog_format(const char* label, const unsigned char client_random[32], const unsigned char* secret,
                   size_t len, char* out, size_t cap) {
  static const char kHex[] = "0123456789abcdef";
  int n = snprintf(out, cap, "%s ", label);
  size_t pos = n > 0 ? static_cast<size_t>(n) : 0;
  auto hex = [&](const unsigned char* in, size_t count) {
    for (size_t i = 0; i < count && pos + 2 < cap; ++i) {
      out[pos++] = kHex[in[i] >> 4];
      out[pos++] = kHex[in[i] & 0x0F];
    }
  };
  hex(client_random, 32);
  if (pos + 1 < cap) out[pos++] = ' ';
  hex(secret, len);
  out[pos < cap ? pos : cap - 1] = '\0';
}

void TlsTransport::keylog(const char* label, const unsigned char* client_random, const unsigned char* secret,
                          size_t len) {
  char line[32 + 65 + 2 * 64 + 2];
  if (len > 64) len = 64;  // the longest secret: SHA-384's 48 bytes
  keylog_format(label, client_random, secret, len, line, sizeof(line));
  opt_.keylog->write_line(line);
}

// Called once the SSL context exists (setup_ssl) and after each reset (reopen): on 3.x the callback is the
// context's, on 2.28 the configuration's.
Err TlsTransport::install_keylog() {
  if (opt_.keylog == nullptr) return Err::Ok;
#if defined(TB_MBEDTLS3)
  mbedtls_ssl_set_export_keys_cb(&ssl_, &TlsTransport::export_keys, this);
  return Err::Ok;
#elif defined(MBEDTLS_SSL_EXPORT_KEYS)
  mbedtls_ssl_conf_export_keys_ext_cb(&conf_, &TlsTransport::export_keys, this);
  return Err::Ok;
#else
  err_.set("a key log was asked for but this mbedTLS lacks MBEDTLS_SSL_EXPORT_KEYS");
  return Err::Keylog;
#endif
}

#if defined(TB_MBEDTLS3)
void TlsTransport::export_keys(void* ctx, mbedtls_ssl_key_export_type type, const unsigned char* secret,
                               size_t len, const unsigned char client_random[32],
                               const unsigned char server_random[32], mbedtls_tls_prf_types prf) {
  (void)server_random;
  (void)prf;
  const char* label = nss_label(type);
  if (label != nullptr) static_cast<TlsTransport*>(ctx)->keylog(label, client_random, secret, len);
}
#elif defined(MBEDTLS_SSL_EXPORT_KEYS)
int TlsTransport::export_keys(void* ctx, const unsigned char* ms, const unsigned char* kb, size_t maclen,
                              size_t keylen, size_t ivlen, const unsigned char client_random[32],
                              const unsigned char server_random[32], mbedtls_tls_prf_types prf) {
  (void)kb;
  (void)maclen;
  (void)keylen;
  (void)ivlen;
  (void)server_random;
  (void)prf;
  static_cast<TlsTransport*>(ctx)->keylog("CLIENT_RANDOM", client_random, ms, 48);
  return 0;
}
#endif

}  // namespace tb
