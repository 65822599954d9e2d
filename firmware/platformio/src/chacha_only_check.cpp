// Build-time check of the env esp32dev-chacha-only (platformio.ini): when the build says
// TESTBED_CHACHA_ONLY, mbedTLS's configuration must have included include/mbedtls_chacha_only.h
// (build flag MBEDTLS_USER_CONFIG_FILE) and its default cipher-suite list must be exactly
// TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256. Compiles to nothing in the other envs.
#if defined(TESTBED_CHACHA_ONLY)

#include <mbedtls/ssl_ciphersuites.h>

#if !defined(TESTBED_MBEDTLS_CHACHA_ONLY)
#error "testbed chacha-only: TESTBED_CHACHA_ONLY is set but mbedTLS's configuration did not include include/mbedtls_chacha_only.h (add -DMBEDTLS_USER_CONFIG_FILE=\"mbedtls_chacha_only.h\" and -I$PROJECT_INCLUDE_DIR to build_flags)"
#endif
#if !defined(MBEDTLS_SSL_CIPHERSUITES)
#error "testbed chacha-only: MBEDTLS_SSL_CIPHERSUITES is not set - clients would offer mbedTLS's default list"
#endif

namespace {
constexpr int kDefaultSuites[] = {MBEDTLS_SSL_CIPHERSUITES};
static_assert(sizeof(kDefaultSuites) == sizeof(int) &&
                  kDefaultSuites[0] == MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
              "testbed chacha-only: MBEDTLS_SSL_CIPHERSUITES must be exactly "
              "MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256");
}  // namespace

#endif  // TESTBED_CHACHA_ONLY
