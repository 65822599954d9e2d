// The granularity-1 variant of env esp32dev-idf5-tls13's mbedTLS 3 user configuration: everything of
// include/mbedtls3_chacha_only.h (both ChaCha20 lists), and TLS 1.3 records NOT padded
// (MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY 1; ssl.h's default, and ESP-IDF's, is 16). Measured beside the stock
// build and named as such: per record 5 B header + 1 B inner content type + 16 B tag, exactly 22 B, as OpenSSL sends.
// On the host: host/chacha_only/build_mbedtls.py --line 3.6-pad1 (tests/firmware/test_mbedtls36_device.py).
#ifndef TESTBED_MBEDTLS3_PADDING1_H
#define TESTBED_MBEDTLS3_PADDING1_H

#include "mbedtls3_chacha_only.h"

#undef MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY
#define MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY 1

#endif  // TESTBED_MBEDTLS3_PADDING1_H
