// mbedTLS 2.28 (ESP-IDF 4.4, Debian 12) and 3.x (ESP-IDF 5, Debian 13's 3.6) behind one set of small
// functions, so that tls_transport.cpp and tls_session.cpp read the same on both. 3.x made most fields of
// the SSL structures private: a public accessor is used where 3.6 has one (mbedtls_ssl_get_version_number,
// mbedtls_ssl_get_hostname); the rest (the received alert's bytes, the handshake state, the TLS 1.2
// master secret, the ticket's length) have none and are read through MBEDTLS_PRIVATE, in this file only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mbedtls/pk.h"
#include "mbedtls/ssl.h"
#include "mbedtls/version.h"

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#define TB_MBEDTLS3 1
#include "psa/crypto.h"
#endif

namespace tb {
namespace tlsc {

#if defined(TB_MBEDTLS3)
constexpr int kErrBadProtocolVersion = MBEDTLS_ERR_SSL_BAD_PROTOCOL_VERSION;
inline const unsigned char* in_msg(const mbedtls_ssl_context* s) { return s->MBEDTLS_PRIVATE(in_msg); }
inline const unsigned char* in_hdr(const mbedtls_ssl_context* s) { return s->MBEDTLS_PRIVATE(in_hdr); }
inline int state(const mbedtls_ssl_context* s) { return s->MBEDTLS_PRIVATE(state); }
inline bool handshake_over(mbedtls_ssl_context* s) { return mbedtls_ssl_is_handshake_over(s) != 0; }
inline const char* hostname(mbedtls_ssl_context* s) { return mbedtls_ssl_get_hostname(s); }
// The negotiated (or, after a failed ServerHello, the offered) version as TLS's 0x0303 / 0x0304.
inline int version_number(const mbedtls_ssl_context* s) { return static_cast<int>(mbedtls_ssl_get_version_number(s)); }
inline const unsigned char* session_master(const mbedtls_ssl_context* s) {
  const mbedtls_ssl_session* cur = s->MBEDTLS_PRIVATE(session);
  return cur != nullptr ? cur->MBEDTLS_PRIVATE(master) : nullptr;
}
inline const unsigned char* saved_master(const mbedtls_ssl_session* s) { return s->MBEDTLS_PRIVATE(master); }
inline size_t ticket_len(const mbedtls_ssl_session* s) { return s->MBEDTLS_PRIVATE(ticket_len); }
inline int session_version(const mbedtls_ssl_session* s) { return static_cast<int>(s->MBEDTLS_PRIVATE(tls_version)); }
inline int pk_parse_key(mbedtls_pk_context* pk, const unsigned char* key, size_t len,
                        int (*f_rng)(void*, unsigned char*, size_t), void* p_rng) {
  return mbedtls_pk_parse_key(pk, key, len, nullptr, 0, f_rng, p_rng);
}
// TLS 1.2 and/or 1.3, by the suites configured (a 1.3 suite allows 1.3, any other suite allows 1.2).
inline void conf_versions(mbedtls_ssl_config* c, bool tls12, bool tls13) {
  mbedtls_ssl_conf_min_tls_version(c, tls12 ? MBEDTLS_SSL_VERSION_TLS1_2 : MBEDTLS_SSL_VERSION_TLS1_3);
  mbedtls_ssl_conf_max_tls_version(c, tls13 ? MBEDTLS_SSL_VERSION_TLS1_3 : MBEDTLS_SSL_VERSION_TLS1_2);
}
// PSA must be initialised before a TLS 1.3 handshake (up to 3.6.0: esp-idf issue 13410); harmless to repeat.
inline int crypto_init() { return static_cast<int>(psa_crypto_init()); }
#else
constexpr int kErrBadProtocolVersion = MBEDTLS_ERR_SSL_BAD_HS_PROTOCOL_VERSION;
inline const unsigned char* in_msg(const mbedtls_ssl_context* s) { return s->in_msg; }
inline const unsigned char* in_hdr(const mbedtls_ssl_context* s) { return s->in_hdr; }
inline int state(const mbedtls_ssl_context* s) { return s->state; }
inline bool handshake_over(mbedtls_ssl_context* s) { return s->state == MBEDTLS_SSL_HANDSHAKE_OVER; }
inline const char* hostname(mbedtls_ssl_context* s) { return s->hostname; }
inline int version_number(const mbedtls_ssl_context* s) { return (s->major_ver << 8) | s->minor_ver; }
inline const unsigned char* session_master(const mbedtls_ssl_context* s) {
  return s->session != nullptr ? s->session->master : nullptr;
}
inline const unsigned char* saved_master(const mbedtls_ssl_session* s) { return s->master; }
inline size_t ticket_len(const mbedtls_ssl_session* s) {
#if defined(MBEDTLS_SSL_SESSION_TICKETS) && defined(MBEDTLS_SSL_CLI_C)
  return s->ticket_len;
#else
  (void)s;
  return 0;
#endif
}
inline int session_version(const mbedtls_ssl_session*) { return 0x0303; }
inline int pk_parse_key(mbedtls_pk_context* pk, const unsigned char* key, size_t len,
                        int (*)(void*, unsigned char*, size_t), void*) {
  return mbedtls_pk_parse_key(pk, key, len, nullptr, 0);
}
inline void conf_versions(mbedtls_ssl_config* c, bool, bool) {  // 2.28: TLS 1.2 only
  mbedtls_ssl_conf_min_version(c, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_max_version(c, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
}
inline int crypto_init() { return 0; }
#endif

constexpr int kTls13 = 0x0304;

// A TLS 1.3 cipher suite id (RFC 8446 B.4: 0x1301..0x1305).
inline bool is_tls13_suite(int id) { return id >= 0x1301 && id <= 0x1305; }

}  // namespace tlsc
}  // namespace tb
