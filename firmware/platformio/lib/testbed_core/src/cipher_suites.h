// IANA TLS 1.2 cipher-suite names <-> code points (mbedTLS uses the IANA code points as ids).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tb_error.h"

namespace tb {

constexpr size_t kMaxCiphers = 16;

// IANA code point for a name such as TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256; 0 when unknown.
uint16_t cipher_id_from_iana(const char* name, size_t len);
// IANA name for a code point; nullptr when not in the table.
const char* cipher_iana_name(uint16_t id);
// True for the ChaCha20-Poly1305 suites.
bool cipher_is_chachapoly(uint16_t id);

// Parses a comma-separated list of IANA names (spaces around names allowed) into ids.
// Unknown names are refused with the name in the error text; duplicates are refused.
Err parse_cipher_list(const char* csv, uint16_t* ids, size_t cap, size_t* count, ErrorText* err);

}  // namespace tb
