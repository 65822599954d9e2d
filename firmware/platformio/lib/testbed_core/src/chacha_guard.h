// Compile-time guard: a build that configures ChaCha20-Poly1305 suites (TESTBED_REQUIRE_CHACHAPOLY)
// must not compile against an mbedTLS without them. Prebuilt Arduino-ESP32 SDKs lack them; the
// ESP32 build enables them in sdkconfig.defaults (CONFIG_MBEDTLS_CHACHA20_C, _POLY1305_C, _CHACHAPOLY_C).
#pragma once

// version.h reads the build's configuration on both lines: 2.28 through config.h (or MBEDTLS_CONFIG_FILE),
// 3.x through build_info.h (MBEDTLS_CONFIG_FILE, MBEDTLS_USER_CONFIG_FILE and the adjustments).
#include "mbedtls/version.h"

#if defined(TESTBED_REQUIRE_CHACHAPOLY)
#if !defined(MBEDTLS_CHACHAPOLY_C) || !defined(MBEDTLS_CHACHA20_C) || !defined(MBEDTLS_POLY1305_C)
#error "testbed: a ChaCha20-Poly1305 suite is configured but mbedTLS lacks MBEDTLS_CHACHAPOLY_C/MBEDTLS_CHACHA20_C/MBEDTLS_POLY1305_C (ESP32: enable CONFIG_MBEDTLS_CHACHA20_C, CONFIG_MBEDTLS_POLY1305_C, CONFIG_MBEDTLS_CHACHAPOLY_C in sdkconfig.defaults)"
#endif
#endif
