// The device's own clock through a TLS handshake (HandshakePhases, transport.h): the handshake stepped state by
// state on mbedTLS 2.28 as on 3.x, the phases its state changes mark, and the device's busy time as the wire can
// see it (orchestrator/analysis/device_phases.py compares the two).
#include "tls_transport.h"

namespace tb {

// Steps the handshake (mbedtls_ssl_handshake_step, on 2.28 as on 3.x), marking each state it leaves on the
// device's monotonic clock (HandshakePhases) and whether the server sent a Certificate: a TLS 1.3 handshake that
// resumed by ticket (PSK) goes from EncryptedExtensions straight to the server's Finished - the client's claim of
// resumption.
int TlsTransport::step_handshake(int64_t start) {
  int ret;
  saw_certificate_ = false;
  do {
    ret = 0;
    while (ret == 0 && !tlsc::handshake_over(&ssl_)) {
      int before = tlsc::state(&ssl_);
      ret = mbedtls_ssl_handshake_step(&ssl_);
      int st = tlsc::state(&ssl_);
      if (st == MBEDTLS_SSL_CERTIFICATE_REQUEST || st == MBEDTLS_SSL_SERVER_CERTIFICATE) saw_certificate_ = true;
      if (ret == 0 && st != before) mark_phase(before, clock_.mono_us() - start);
    }
  } while (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE);
  return ret;
}

// The handshake left state `left` at t (us since it began): the phase that marks, if any (HandshakePhases).
void TlsTransport::mark_phase(int left, int64_t t) {
  HandshakePhases& p = stats_.phases;
  switch (left) {
    case MBEDTLS_SSL_CLIENT_HELLO: p.hello_sent_us = t; break;
    case MBEDTLS_SSL_SERVER_CERTIFICATE: p.verified_us = t; break;
    case MBEDTLS_SSL_CLIENT_KEY_EXCHANGE: p.kex_done_us = t; break;  // TLS 1.2: keygen + ECDH, then written
    case MBEDTLS_SSL_CLIENT_FINISHED: p.finished_sent_us = t; break;
    case MBEDTLS_SSL_SERVER_HELLO:  // TLS 1.3: the handshake secret (ECDHE) is derived from the ServerHello
      if (tlsc::version_number(&ssl_) == tlsc::kTls13) p.kex_done_us = t;
      break;
    case MBEDTLS_SSL_SERVER_HELLO_DONE:
    case MBEDTLS_SSL_SERVER_FINISHED:
      if (p.flight_in_us < 0) p.flight_in_us = t;  // the first server flight the device answers
      break;
    default: break;
  }
}

// The device's busy time (HandshakePhases::busy_us), as the wire can see it: from TCP connected, each stretch up to
// the device's next send, less the reads inside it (a read may wait for the rest of the broker's flight); but after
// a send, the stretch that ends at a read restarts at the end of the first read (the broker's answer in hand): work
// after a send and before that read ends overlaps the broker's time and the network's, which the wire counts as
// theirs. Within one of the device's flights (its sends back to back) every gap is its own.
void TlsTransport::on_sent() {
  int64_t now = clock_.mono_us();
  busy_us_ += now - stretch_us_ - read_us_;
  stretch_us_ = now;
  read_us_ = 0;
  sent_ = true;
}

void TlsTransport::on_read(int64_t start, int64_t end) {
  if (sent_) {  // the first read after a send: the device's work on the broker's answer starts when it ends
    sent_ = false;
    stretch_us_ = end;
    read_us_ = 0;
  } else {
    read_us_ += end - start;
  }
}

}  // namespace tb
