// mbedTLS 2.28 user configuration of the "ChaCha20-only" build (PlatformIO env esp32dev-chacha-only).
//
// mbedTLS includes this file at the end of its configuration, through MBEDTLS_USER_CONFIG_FILE:
// ESP-IDF 4.4's components/mbedtls/port/include/mbedtls/esp_config.h and upstream's mbedtls/config.h
// both do `#include MBEDTLS_USER_CONFIG_FILE` right before `#include "mbedtls/check_config.h"`, so
// everything sdkconfig (Kconfig) decided is already known here.
//
// Why a user config file: ESP-IDF 4.4 cannot drop the AES suites through Kconfig (esp_config.h defines
// MBEDTLS_CIPHER_MODE_CBC unconditionally and MBEDTLS_CTR_DRBG_C, which needs MBEDTLS_AES_C), and
// WiFiClientSecure has no cipher-suite API. MBEDTLS_SSL_CIPHERSUITES replaces mbedTLS's built-in
// preference list (library/ssl_ciphersuites.c), which mbedtls_ssl_config_defaults() installs in every
// mbedtls_ssl_config. So every client that does not call mbedtls_ssl_conf_ciphersuites() itself -
// WiFiClientSecure (ssl_client.cpp), ESP-IDF's esp-tls and what is built on it - offers exactly
// TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 (0xCCA9), plus the renegotiation SCSV 0x00FF that
// mbedTLS always appends. The AES code stays compiled (CTR_DRBG, PEM, a client that sets its own list
// can still use it); it is only never offered by default. Clients with their own list keep it: the
// testbed core's TlsTransport (the scenario's list) and wpa_supplicant's EAP-TLS.
//
// The host proves it: tests/firmware/test_chacha_only_config.py builds Debian's mbedTLS 2.28 source with
// this very file and reads the ClientHello off the wire.
#ifndef TESTBED_MBEDTLS_CHACHA_ONLY_H
#define TESTBED_MBEDTLS_CHACHA_ONLY_H

// Marker for application code: "mbedTLS's configuration did include this file" (checked by
// src/chacha_only_check.cpp when the build defines TESTBED_CHACHA_ONLY).
#define TESTBED_MBEDTLS_CHACHA_ONLY 1

// ---- the setting --------------------------------------------------------------------------------
// The complete default cipher-suite list. Identifiers are the MBEDTLS_TLS_* names of
// mbedtls/ssl_ciphersuites.h (expanded only where the list is used, after that header).
#undef MBEDTLS_SSL_CIPHERSUITES
#define MBEDTLS_SSL_CIPHERSUITES MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256

// ---- the guards ---------------------------------------------------------------------------------
// With MBEDTLS_SSL_CIPHERSUITES set, mbedtls_ssl_list_ciphersuites() returns the list unfiltered; a
// suite whose code is not compiled is then silently skipped when the ClientHello is written, leaving
// an empty offer. Hence: refuse to build unless 0xCCA9 is really available.
#if !defined(MBEDTLS_SSL_CIPHERSUITES)
#error "testbed chacha-only: MBEDTLS_SSL_CIPHERSUITES is not set in include/mbedtls_chacha_only.h - clients would offer mbedTLS's default list (AES suites included)"
#endif

#if !defined(MBEDTLS_CHACHAPOLY_C) || !defined(MBEDTLS_CHACHA20_C) || !defined(MBEDTLS_POLY1305_C)
#error "testbed chacha-only: mbedTLS lacks MBEDTLS_CHACHAPOLY_C/MBEDTLS_CHACHA20_C/MBEDTLS_POLY1305_C, so TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 cannot be offered (ESP32: CONFIG_MBEDTLS_CHACHA20_C, CONFIG_MBEDTLS_POLY1305_C, CONFIG_MBEDTLS_CHACHAPOLY_C in sdkconfig.defaults)"
#endif

#if !defined(MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA_ENABLED)
#error "testbed chacha-only: mbedTLS lacks MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA_ENABLED (ESP32: CONFIG_MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA=y)"
#endif

#if !defined(MBEDTLS_SHA256_C) || !defined(MBEDTLS_SSL_PROTO_TLS1_2) || !defined(MBEDTLS_SSL_CLI_C)
#error "testbed chacha-only: mbedTLS lacks MBEDTLS_SHA256_C/MBEDTLS_SSL_PROTO_TLS1_2/MBEDTLS_SSL_CLI_C (a TLS 1.2 client with SHA-256 is required)"
#endif

#endif  // TESTBED_MBEDTLS_CHACHA_ONLY_H
