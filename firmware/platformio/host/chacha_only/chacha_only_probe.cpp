// Host probe of the ChaCha-only mbedTLS configuration (include/mbedtls_chacha_only.h).
//
//   chacha_only_probe list
//       prints mbedtls_ssl_list_ciphersuites(), the default list every mbedtls_ssl_config gets,
//       one "0xCCA9 TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256" line per suite
//   chacha_only_probe connect HOST PORT CA_FILE SERVER_NAME
//       a TLS client configured the way Arduino-ESP32's WiFiClientSecure (ssl_client.cpp) does it:
//       mbedtls_ssl_config_defaults(), CA chain, hostname, CTR_DRBG - and no cipher-suite call.
//       Prints "version=... suite=..." after the handshake, sends one line, closes with close_notify.
//
// Exit 0 on success, 1 on a TLS/network error (one "chacha_only_probe: error ..." line), 2 on usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ciphersuites.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crt.h>
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#include <psa/crypto.h>
#endif

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: chacha_only_probe list\n"
               "       chacha_only_probe connect HOST PORT CA_FILE SERVER_NAME\n");
  return 2;
}

int fail(const char* what, int rc) {
  char text[160];
  mbedtls_strerror(rc, text, sizeof text);
  std::fprintf(stderr, "chacha_only_probe: error %s: -0x%04X %s\n", what, static_cast<unsigned>(-rc), text);
  return 1;
}

int list_suites() {
  for (const int* id = mbedtls_ssl_list_ciphersuites(); *id != 0; ++id) {
    const mbedtls_ssl_ciphersuite_t* info = mbedtls_ssl_ciphersuite_from_id(*id);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    const char* name = info != nullptr ? mbedtls_ssl_ciphersuite_get_name(info) : "(not compiled)";
#else
    const char* name = info != nullptr ? info->name : "(not compiled)";
#endif
    std::printf("0x%04X %s\n", static_cast<unsigned>(*id), name);
  }
  return 0;
}

struct Client {
  mbedtls_net_context net;
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_x509_crt ca;
  mbedtls_ssl_config conf;
  mbedtls_ssl_context ssl;
  Client() {
    mbedtls_net_init(&net);
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_x509_crt_init(&ca);
    mbedtls_ssl_config_init(&conf);
    mbedtls_ssl_init(&ssl);
  }
  ~Client() {
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&conf);
    mbedtls_x509_crt_free(&ca);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    mbedtls_net_free(&net);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
};

int connect_once(const char* host, const char* port, const char* ca_file, const char* server_name) {
  Client c;
  static const char kPers[] = "chacha-only-probe";
  int rc = mbedtls_ctr_drbg_seed(&c.drbg, mbedtls_entropy_func, &c.entropy,
                                 reinterpret_cast<const unsigned char*>(kPers), sizeof kPers - 1);
  if (rc != 0) return fail("ctr_drbg_seed", rc);
  if ((rc = mbedtls_x509_crt_parse_file(&c.ca, ca_file)) != 0) return fail("x509_crt_parse_file", rc);
  // As WiFiClientSecure: the defaults, nothing about cipher suites.
  rc = mbedtls_ssl_config_defaults(&c.conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                   MBEDTLS_SSL_PRESET_DEFAULT);
  if (rc != 0) return fail("ssl_config_defaults", rc);
  mbedtls_ssl_conf_authmode(&c.conf, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_ca_chain(&c.conf, &c.ca, nullptr);
  mbedtls_ssl_conf_rng(&c.conf, mbedtls_ctr_drbg_random, &c.drbg);
  if ((rc = mbedtls_ssl_setup(&c.ssl, &c.conf)) != 0) return fail("ssl_setup", rc);
  if ((rc = mbedtls_ssl_set_hostname(&c.ssl, server_name)) != 0) return fail("ssl_set_hostname", rc);
  if ((rc = mbedtls_net_connect(&c.net, host, port, MBEDTLS_NET_PROTO_TCP)) != 0) return fail("net_connect", rc);
  mbedtls_ssl_set_bio(&c.ssl, &c.net, mbedtls_net_send, mbedtls_net_recv, nullptr);
  while ((rc = mbedtls_ssl_handshake(&c.ssl)) != 0) {
    if (rc != MBEDTLS_ERR_SSL_WANT_READ && rc != MBEDTLS_ERR_SSL_WANT_WRITE) return fail("ssl_handshake", rc);
  }
  std::printf("version=%s suite=%s\n", mbedtls_ssl_get_version(&c.ssl), mbedtls_ssl_get_ciphersuite(&c.ssl));
  std::fflush(stdout);
  static const unsigned char kLine[] = "chacha-only probe\n";
  size_t off = 0;
  while (off < sizeof kLine - 1) {
    rc = mbedtls_ssl_write(&c.ssl, kLine + off, sizeof kLine - 1 - off);
    if (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
    if (rc < 0) return fail("ssl_write", rc);
    off += static_cast<size_t>(rc);
  }
  mbedtls_ssl_close_notify(&c.ssl);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
  if (psa_crypto_init() != PSA_SUCCESS) return fail("psa_crypto_init", -1);  // before a TLS 1.3 handshake
#endif
  if (argc == 2 && std::strcmp(argv[1], "list") == 0) return list_suites();
  if (argc == 6 && std::strcmp(argv[1], "connect") == 0) return connect_once(argv[2], argv[3], argv[4], argv[5]);
  return usage();
}
