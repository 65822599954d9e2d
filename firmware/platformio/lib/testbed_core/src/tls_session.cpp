// TlsTransport across connections: the SSL context reset for each new connection, the end without
// close_notify, and TLS 1.2 session resumption (RFC 5246 7.3 by session ID, RFC 5077 by ticket).
// The client's own claim of resumption: after the handshake, the new session's master secret is the
// offered session's (an abbreviated handshake keeps it; a full one derives a new one). The fields of
// mbedtls_ssl_session are public in mbedTLS 2.28 (3.x makes them private).
#include <cstring>

#include "tls_transport.h"

namespace tb {

static_assert(sizeof(mbedtls_ssl_session::master) == 48, "TLS 1.2 master secret is 48 bytes");

int tls_resumed_claim(bool offered, const unsigned char* offered_master, const unsigned char* new_master) {
  if (!offered || offered_master == nullptr || new_master == nullptr) return 0;
  return memcmp(offered_master, new_master, 48) == 0 ? 1 : 0;
}

Err TlsTransport::reopen(const char* host) {
  int ret = mbedtls_ssl_session_reset(&ssl_);
  if (ret != 0) return fail(ret, Err::TlsSetup, "resetting the TLS context for a new connection failed");
  const char* name = opt_.server_name != nullptr ? opt_.server_name : host;
  ret = mbedtls_ssl_set_hostname(&ssl_, name);
  if (ret != 0) return fail(ret, Err::TlsSetup, "server name for verification refused");
  return Err::Ok;
}

void TlsTransport::abort() {
  open_ = false;  // no close_notify
  tcp_.close();
}

void TlsTransport::forget_session() {
  mbedtls_ssl_session_free(&saved_);
  mbedtls_ssl_session_init(&saved_);
  have_saved_ = false;
}

void TlsTransport::set_resumption(SessionResumption r) {
  if (r == resumption_) return;
  resumption_ = r;
  forget_session();
  if (configured_) apply_resumption();
}

// SessionId: the ClientHello carries no SessionTicket extension, so the server can only resume by ID.
// Ticket (and None, mbedTLS's default): the extension is sent, a server may issue a ticket.
void TlsTransport::apply_resumption() {
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
  mbedtls_ssl_conf_session_tickets(&conf_, resumption_ == SessionResumption::SessionId
                                               ? MBEDTLS_SSL_SESSION_TICKETS_DISABLED
                                               : MBEDTLS_SSL_SESSION_TICKETS_ENABLED);
#endif
}

Err TlsTransport::check_resumption() {
#if !defined(MBEDTLS_SSL_SESSION_TICKETS)
  if (resumption_ == SessionResumption::Ticket) {
    err_.set("resumption by session ticket needs an mbedTLS with MBEDTLS_SSL_SESSION_TICKETS");
    return Err::InvalidArgument;
  }
#endif
  return Err::Ok;
}

// Before the handshake: the saved session (if any) goes into the ClientHello.
Err TlsTransport::offer_session() {
  stats_.session_offered = false;
  if (resumption_ == SessionResumption::None || !have_saved_) return Err::Ok;
#if defined(MBEDTLS_SSL_SESSION_TICKETS) && defined(MBEDTLS_SSL_CLI_C)
  // Ticket mode resumes by ticket only: a session the server issued no ticket for (tickets off) is not
  // offered, else mbedTLS would offer its session ID and the run would measure ID resumption instead.
  if (resumption_ == SessionResumption::Ticket && saved_.ticket_len == 0) return Err::Ok;
#endif
  int ret = mbedtls_ssl_set_session(&ssl_, &saved_);
  if (ret != 0) return fail(ret, Err::TlsSetup, "offering the saved TLS session failed");
  memcpy(offered_master_, saved_.master, sizeof(offered_master_));
  stats_.session_offered = true;
  return Err::Ok;
}

// After a completed handshake: the claim, and the session saved for the next connection.
Err TlsTransport::after_handshake() {
  stats_.resumed = tls_resumed_claim(stats_.session_offered, offered_master_,
                                     ssl_.session != nullptr ? ssl_.session->master : nullptr);
  if (resumption_ == SessionResumption::None) return Err::Ok;
  forget_session();
  int ret = mbedtls_ssl_get_session(&ssl_, &saved_);
  if (ret != 0) {
    forget_session();
    return fail(ret, Err::TlsSetup, "saving the TLS session for the next connection failed");
  }
  have_saved_ = true;
  return Err::Ok;
}

}  // namespace tb
