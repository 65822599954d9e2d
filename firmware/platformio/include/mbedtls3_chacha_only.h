// mbedTLS 3.x user configuration of the env esp32dev-idf5-tls13 (Arduino-ESP32 3.x on ESP-IDF 5).
//
// mbedTLS 3's build_info.h includes MBEDTLS_CONFIG_FILE (ESP-IDF 5: mbedtls/esp_config.h, i.e. what
// sdkconfig.idf5.defaults decided), then this file (MBEDTLS_USER_CONFIG_FILE), then the config
// adjustments and check_config.h - the same mechanism as include/mbedtls_chacha_only.h on mbedTLS 2.28.
//
// The setting: mbedTLS's default cipher-suite list, which mbedtls_ssl_config_defaults() installs in every
// client that never calls mbedtls_ssl_conf_ciphersuites() (WiFiClientSecure/NetworkClientSecure,
// esp-tls), becomes the two ChaCha20-Poly1305 suites: TLS 1.3 TLS_CHACHA20_POLY1305_SHA256 (0x1303) and
// TLS 1.2 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 (0xCCA9); a TLS 1.3 ClientHello carries the first,
// and a server that only speaks TLS 1.2 can still pick the second.
// Not compiled on the testbed's CI machine (Debian ships mbedTLS 2.28 only); see firmware/platformio/README.md.
#ifndef TESTBED_MBEDTLS3_CHACHA_ONLY_H
#define TESTBED_MBEDTLS3_CHACHA_ONLY_H

#define TESTBED_MBEDTLS3_CHACHA_ONLY 1

#undef MBEDTLS_SSL_CIPHERSUITES
#define MBEDTLS_SSL_CIPHERSUITES \
  MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256, MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256

// TLS 1.3 record padding is left at the build's granularity (16 by default, sdkconfig.idf5.defaults):
// the board measures what a stock device sends; granularity 1 is a separately named variant.

#if !defined(MBEDTLS_CHACHAPOLY_C) || !defined(MBEDTLS_CHACHA20_C) || !defined(MBEDTLS_POLY1305_C)
#error "testbed chacha-only (mbedTLS 3): ChaCha20-Poly1305 is off (sdkconfig.idf5.defaults: CONFIG_MBEDTLS_CHACHA20_C, CONFIG_MBEDTLS_POLY1305_C, CONFIG_MBEDTLS_CHACHAPOLY_C)"
#endif
#if !defined(MBEDTLS_SSL_PROTO_TLS1_3)
#error "testbed chacha-only (mbedTLS 3): TLS 1.3 is off (sdkconfig.idf5.defaults: CONFIG_MBEDTLS_SSL_PROTO_TLS1_3=y)"
#endif
#if !defined(MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA_ENABLED) || !defined(MBEDTLS_SSL_PROTO_TLS1_2) || \
    !defined(MBEDTLS_SSL_CLI_C)
#error "testbed chacha-only (mbedTLS 3): a TLS 1.2 ECDHE-ECDSA client is required (CONFIG_MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA=y)"
#endif

#endif  // TESTBED_MBEDTLS3_CHACHA_ONLY_H
