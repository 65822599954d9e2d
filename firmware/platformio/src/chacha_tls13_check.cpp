// Build-time check of the env esp32dev-idf5-tls13 (platformio.ini): mbedTLS 3's configuration must have
// included include/mbedtls3_chacha_only.h, and its default list must be exactly 0x1303, 0xCCA9.
// Compiles to nothing in the other envs.
#if defined(TESTBED_CHACHA_TLS13)

#include <mbedtls/ssl_ciphersuites.h>

#if !defined(MBEDTLS_VERSION_MAJOR) || MBEDTLS_VERSION_MAJOR < 3
#error "testbed: env esp32dev-idf5-tls13 needs mbedTLS 3 (ESP-IDF 5, Arduino-ESP32 3.x)"
#endif
#if !defined(TESTBED_MBEDTLS3_CHACHA_ONLY)
#error "testbed: TESTBED_CHACHA_TLS13 is set but mbedTLS did not include include/mbedtls3_chacha_only.h (-DMBEDTLS_USER_CONFIG_FILE=\"mbedtls3_chacha_only.h\" -I$PROJECT_INCLUDE_DIR)"
#endif

namespace {
constexpr int kDefaultSuites[] = {MBEDTLS_SSL_CIPHERSUITES};
static_assert(sizeof(kDefaultSuites) == 2 * sizeof(int) &&
                  kDefaultSuites[0] == MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256 &&
                  kDefaultSuites[1] == MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
              "testbed: the default list must be TLS_CHACHA20_POLY1305_SHA256, "
              "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256");
}  // namespace

#endif  // TESTBED_CHACHA_TLS13
