#include "cipher_suites.h"

#include <cstring>

namespace tb {
namespace {

struct Suite {
  uint16_t id;
  const char* name;
};

// TLS 1.2 AEAD and CBC suites relevant to an MQTT sensor link (RFC 7905, 5289, 5288), and the TLS 1.3 suites
// (RFC 8446 B.4; only an mbedTLS 3.x with MBEDTLS_SSL_PROTO_TLS1_3 has them compiled).
const Suite kSuites[] = {
    {0x1303, "TLS_CHACHA20_POLY1305_SHA256"},
    {0x1301, "TLS_AES_128_GCM_SHA256"},
    {0x1302, "TLS_AES_256_GCM_SHA384"},
    {0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"},
    {0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"},
    {0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256"},
    {0xCCAB, "TLS_PSK_WITH_CHACHA20_POLY1305_SHA256"},
    {0xCCAC, "TLS_ECDHE_PSK_WITH_CHACHA20_POLY1305_SHA256"},
    {0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
    {0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
    {0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
    {0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"},
    {0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256"},
    {0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384"},
    {0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256"},
    {0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384"},
    {0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"},
    {0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"},
    {0xC0AC, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM"},
    {0xC0AE, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8"},
};

}  // namespace

uint16_t cipher_id_from_iana(const char* name, size_t len) {
  for (const Suite& s : kSuites) {
    if (strlen(s.name) == len && strncmp(s.name, name, len) == 0) return s.id;
  }
  return 0;
}

const char* cipher_iana_name(uint16_t id) {
  for (const Suite& s : kSuites) {
    if (s.id == id) return s.name;
  }
  return nullptr;
}

bool cipher_is_chachapoly(uint16_t id) { return (id >= 0xCCA8 && id <= 0xCCAE) || id == 0x1303; }

Err parse_cipher_list(const char* csv, uint16_t* ids, size_t cap, size_t* count, ErrorText* err) {
  *count = 0;
  if (csv == nullptr) {
    err->set("cipher list is empty");
    return Err::InvalidArgument;
  }
  const char* p = csv;
  while (true) {
    while (*p == ' ') ++p;
    const char* start = p;
    while (*p != '\0' && *p != ',') ++p;
    const char* end = p;
    while (end > start && end[-1] == ' ') --end;
    size_t len = static_cast<size_t>(end - start);
    if (len == 0) {
      err->set("cipher list \"%s\" has an empty entry", csv);
      return Err::InvalidArgument;
    }
    uint16_t id = cipher_id_from_iana(start, len);
    if (id == 0) {
      err->set("unknown cipher suite \"%.*s\" (use IANA names such as "
               "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)",
               static_cast<int>(len), start);
      return Err::UnknownCipher;
    }
    for (size_t i = 0; i < *count; ++i) {
      if (ids[i] == id) {
        err->set("cipher suite \"%.*s\" is listed twice", static_cast<int>(len), start);
        return Err::InvalidArgument;
      }
    }
    if (*count >= cap) {
      err->set("more than %u cipher suites", static_cast<unsigned>(cap));
      return Err::InvalidArgument;
    }
    ids[(*count)++] = id;
    if (*p == '\0') break;
    ++p;  // skip the comma
  }
  return Err::Ok;
}

}  // namespace tb
