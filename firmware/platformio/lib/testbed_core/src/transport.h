// A byte-stream transport to the broker: plain TCP or TLS over BSD sockets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "connection_mode.h"
#include "sleep_mode.h"
#include "tb_error.h"

namespace tb {

struct TlsOptions;  // tls_transport.h

// The device's own clock through one TLS handshake (mbedTLS's state changes, stepped with
// mbedtls_ssl_handshake_step), each in us since the handshake began (the ClientHello about to be written); -1 when
// not reached or not measured (plain TCP; the WiFiClientSecure env, which runs the handshake inside Arduino's
// client and reports the whole handshake only). busy_us is the figure the wire's split_device_ms measures
// (orchestrator/analysis/handshake_split.py): TCP connected -> the first application write (the CONNECT), less
// the time the device spent waiting in its reads for the broker.
struct HandshakePhases {
  int64_t hello_sent_us = -1;     // ClientHello written
  int64_t flight_in_us = -1;      // the server's flight read: ServerHelloDone (TLS 1.2 full), else its Finished
  int64_t verified_us = -1;       // the server's certificate chain verified (a resumed handshake has none)
  int64_t kex_done_us = -1;       // TLS 1.2: ClientKeyExchange written; TLS 1.3: the ServerHello's ECDHE done
  int64_t finished_sent_us = -1;  // the client's Finished written
  int64_t busy_us = -1;           // TCP connected -> first application write, less the waits for the broker
};

struct TransportStats {
  int64_t tcp_connect_us = -1;  // connect() of the attempt that succeeded
  int64_t handshake_us = -1;    // TLS: ClientHello to both Finished; -1 for plain TCP
  char tls_version[16] = {0};   // e.g. "TLSv1.2"; empty for plain TCP
  char cipher_suite[64] = {0};  // IANA name; empty for plain TCP
  uint16_t cipher_id = 0;
  // TLS, the client's own claim after a completed handshake: 1 = the session offered was resumed (the
  // new master secret is the offered session's), 0 = full handshake (also when nothing was offered);
  // -1 = plain TCP or no completed handshake.
  int resumed = -1;
  bool session_offered = false;  // TLS: a saved session was offered in the ClientHello
  HandshakePhases phases;        // TLS through the core's own TlsTransport only
  // WebSocket (websocket.h): the HTTP upgrade, from its request handed to the inner transport to the 101
  // answer checked; -1 without WebSocket.
  int64_t ws_upgrade_us = -1;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Err open(const char* host, uint16_t port, uint32_t timeout_ms) = 0;
  virtual Err write_all(const uint8_t* data, size_t len) = 0;
  // Reads 1..cap bytes; Err::RecvTimeout when nothing arrived within timeout_ms.
  virtual Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) = 0;
  // Ends the connection orderly (TLS: close_notify, then the socket). A transport may be opened again.
  virtual void close() = 0;
  // Ends the connection as a power loss would: the socket is closed, nothing else is sent (no TLS
  // close_notify). Plain TCP: the same as close().
  virtual void abort() { close(); }
  // What to do with a connection's TLS session for the next open(); plain transports ignore it.
  virtual void set_resumption(SessionResumption) {}
  // A deep sleep (sleep_mode.h): the session the next open() would offer, serialized into `out` (cleared
  // when there is none, and for plain TCP); restore_session() makes a kept one the session to offer (one that
  // is not valid() leaves none: the next handshake is full); power_off() forgets everything the transport
  // holds in RAM, as the chip's reset at a deep sleep's wake does (TLS: its contexts, random generator, parsed
  // CA, saved session): the next open() configures it anew.
  virtual Err keep_session(KeptSession* out) {
    out->clear();
    return Err::Ok;
  }
  virtual Err restore_session(const KeptSession& in) {
    (void)in;
    return Err::Ok;
  }
  virtual void power_off() { abort(); }
  virtual const char* error_text() const = 0;
  virtual const TransportStats& stats() const = 0;
  // A TLS transport's configuration (CA, server name, suites), nullptr for plain TCP: lets a
  // TransportFilter build another TLS client for the same RUN (the board's WiFiClientSecure env).
  virtual const TlsOptions* tls_options() const { return nullptr; }

  // Reads exactly len bytes (each wait bounded by timeout_ms).
  Err read_exact(uint8_t* buf, size_t len, uint32_t timeout_ms) {
    size_t done = 0;
    while (done < len) {
      size_t got = 0;
      Err e = read_some(buf + done, len - done, &got, timeout_ms);
      if (e != Err::Ok) return e;
      done += got;
    }
    return Err::Ok;
  }
};

}  // namespace tb
