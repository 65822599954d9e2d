// TlsTransport across connections: the SSL context reset for each new connection, the end without
// close_notify, and session resumption: TLS 1.2 by session ID (RFC 5246 7.3) or ticket (RFC 5077), TLS 1.3
// by ticket (RFC 8446 4.6.1, mbedTLS 3.x). The client's own claim of resumption after a TLS 1.2 handshake:
// the new session's master secret is the offered session's (an abbreviated handshake keeps it; a full one
// derives a new one). The private fields of mbedTLS 3.x are read through tls_compat.h.
// TLS 1.3: the ticket comes AFTER the handshake (NewSessionTicket), so the session is saved when
// mbedtls_ssl_read reports it (MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET, read_some), not after the
// handshake; since 3.6.1 the client sees tickets only when the signal is enabled (apply_resumption).
#include <cstring>

#include "tls_transport.h"

namespace tb {

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
  return install_keylog();  // 3.x: the callback is the context's
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
#if defined(TB_MBEDTLS3) && defined(MBEDTLS_SSL_PROTO_TLS1_3) && defined(MBEDTLS_SSL_SESSION_TICKETS) && \
    MBEDTLS_VERSION_NUMBER >= 0x03060100
  mbedtls_ssl_conf_tls13_enable_signal_new_session_tickets(
      &conf_, resumption_ == SessionResumption::Ticket ? MBEDTLS_SSL_TLS1_3_SIGNAL_NEW_SESSION_TICKETS_ENABLED
                                                       : MBEDTLS_SSL_TLS1_3_SIGNAL_NEW_SESSION_TICKETS_DISABLED);
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
  if (resumption_ == SessionResumption::Ticket && tlsc::ticket_len(&saved_) == 0) return Err::Ok;
#endif
  int ret = mbedtls_ssl_set_session(&ssl_, &saved_);
  if (ret != 0) return fail(ret, Err::TlsSetup, "offering the saved TLS session failed");
  memcpy(offered_master_, tlsc::saved_master(&saved_), sizeof(offered_master_));
  stats_.session_offered = true;
  return Err::Ok;
}

// After a completed handshake: the claim, and (TLS 1.2) the session saved for the next connection.
Err TlsTransport::after_handshake() {
  const bool tls13 = tlsc::version_number(&ssl_) == tlsc::kTls13;
  stats_.resumed = tls13 ? (stats_.session_offered && !saw_certificate_ ? 1 : 0)
                         : tls_resumed_claim(stats_.session_offered, offered_master_, tlsc::session_master(&ssl_));
  if (resumption_ == SessionResumption::None) return Err::Ok;
  forget_session();
  if (tls13) return Err::Ok;  // the ticket is still to come: save_ticket_session
  int ret = mbedtls_ssl_get_session(&ssl_, &saved_);
  if (ret != 0) {
    forget_session();
    return fail(ret, Err::TlsSetup, "saving the TLS session for the next connection failed");
  }
  have_saved_ = true;
  return Err::Ok;
}

// TLS 1.3 (mbedTLS 3.x): a NewSessionTicket was read; the session now carries it. Without resumption (or in
// session-ID mode, which TLS 1.3 does not have) the ticket is not kept. A failure to save leaves the next
// connection a full handshake (the claim then says 0), it does not end this one.
void TlsTransport::save_ticket_session() {
  if (resumption_ != SessionResumption::Ticket) return;
  forget_session();
  if (mbedtls_ssl_get_session(&ssl_, &saved_) == 0) {
    have_saved_ = true;
  } else {
    forget_session();
  }
}

}  // namespace tb

namespace tb {

// A deep sleep's kept session (sleep_mode.h): mbedtls_ssl_session_save of the session the next open() would
// offer; none saved (or, in ticket mode, a session without a ticket, which offer_session would not offer):
// cleared.
Err TlsTransport::keep_session(KeptSession* out) {
  out->clear();
  if (!have_saved_ || resumption_ == SessionResumption::None) return Err::Ok;
  size_t len = 0;
  int ret = mbedtls_ssl_session_save(&saved_, out->bytes, KeptSession::kCapacity, &len);
  if (ret != 0) return fail(ret, Err::BufferTooSmall, "the TLS session does not fit the kept session's buffer");
  out->seal(len);
  return Err::Ok;
}

Err TlsTransport::restore_session(const KeptSession& in) {
  forget_session();
  if (!in.valid() || resumption_ == SessionResumption::None) return Err::Ok;
  int ret = mbedtls_ssl_session_load(&saved_, in.bytes, in.length);
  if (ret != 0) {
    forget_session();
    return fail(ret, Err::TlsSetup, "the kept TLS session does not load (another mbedTLS build wrote it?)");
  }
  have_saved_ = true;
  return Err::Ok;
}

// Everything in RAM freed and made anew, as at boot; the options (the program's configuration) and the
// resumption asked for stay, as the firmware sets them again after a wake.
void TlsTransport::power_off() {
  abort();
  free_contexts();
  init_contexts();
  configured_ = false;
  setup_attempted_ = false;
  have_saved_ = false;
  memset(offered_master_, 0, sizeof(offered_master_));
}

}  // namespace tb
