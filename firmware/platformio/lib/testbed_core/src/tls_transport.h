// TLS client transport over mbedTLS 2.28 (TLS 1.2) or 3.x (TLS 1.2 and 1.3; tls_compat.h): CA verification +
// hostname check, configured cipher suites only (a TLS 1.3 suite in the list allows TLS 1.3, any other suite
// TLS 1.2), handshake time, optional client certificate and NSS key log (tls_keylog.cpp).
// open() may be called again after close()/abort(): the configuration (RNG, CA, suites) is made once,
// the SSL context is reset for each connection, and with set_resumption(SessionId|Ticket) the session
// of the last completed handshake is offered in the next ClientHello (tls_session.cpp).
#pragma once

#include "chacha_guard.h"
#include "cipher_suites.h"
#include "clock.h"
#include "mbedtls/ctr_drbg.h"
#include "mbedtls/entropy.h"
#include "mbedtls/pk.h"
#include "mbedtls/ssl.h"
#include "mbedtls/x509_crt.h"
#include "plain_tcp.h"
#include "tls_compat.h"
#include "transport.h"

namespace tb {

// Every suite of the list is compiled into this mbedTLS (a TLS 1.3 suite needs a 3.x built with TLS 1.3):
// what configure() refuses, asked before anything connects (vdevice's and the fleet's --check).
Err check_ciphers_compiled(const uint16_t* ids, size_t count, ErrorText* err);

// Receives NSS key-log lines, no newline: "CLIENT_RANDOM <client random hex> <master secret hex>" (TLS 1.2),
// "<LABEL> <client random hex> <secret hex>" for each TLS 1.3 secret (CLIENT_HANDSHAKE_TRAFFIC_SECRET, ...).
class KeylogSink {
 public:
  virtual ~KeylogSink() = default;
  virtual void write_line(const char* line) = 0;
};

// The client's claim of resumption after a completed TLS 1.2 handshake (tls_session.cpp): 1 when a
// session was offered and the new session's 48-byte master secret is the offered one's, else 0.
int tls_resumed_claim(bool offered, const unsigned char* offered_master, const unsigned char* new_master);

// One key-log line into out (cap >= 32 + 65 + 2 * len): "<label> <client random hex> <secret hex>".
void keylog_format(const char* label, const unsigned char client_random[32], const unsigned char* secret,
                   size_t len, char* out, size_t cap);

struct TlsOptions {
  const char* ca_pem = nullptr;           // required, NUL-terminated PEM
  const char* client_cert_pem = nullptr;  // optional, mutual TLS (with client_key_pem)
  const char* client_key_pem = nullptr;
  const char* server_name = nullptr;      // hostname to verify (and SNI); defaults to the host
  const char* ciphers = nullptr;          // comma-separated IANA names
  KeylogSink* keylog = nullptr;           // optional
};

class TlsTransport : public Transport {
 public:
  TlsTransport(Clock& clock, const TlsOptions& options);
  ~TlsTransport() override;
  TlsTransport(const TlsTransport&) = delete;
  TlsTransport& operator=(const TlsTransport&) = delete;

  Err open(const char* host, uint16_t port, uint32_t timeout_ms) override;
  Err write_all(const uint8_t* data, size_t len) override;
  Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
  void close() override;
  void abort() override;  // no close_notify: the socket is just closed
  void set_resumption(SessionResumption r) override;
  Err keep_session(KeptSession* out) override;  // tls_session.cpp
  Err restore_session(const KeptSession& in) override;
  void power_off() override;
  const char* error_text() const override { return err_.c_str(); }
  const TransportStats& stats() const override { return stats_; }
  const TlsOptions* tls_options() const override { return &opt_; }

 private:
  void init_contexts();
  void free_contexts();
  Err configure(const char* host);
  Err load_credentials();
  Err setup_ssl(const char* host);
  Err reopen(const char* host);
  void apply_resumption();
  Err check_resumption();
  Err offer_session();
  Err after_handshake();
  void forget_session();
  Err handshake(uint32_t timeout_ms);
  int step_handshake(int64_t start);
  void mark_phase(int left, int64_t t);
  void on_sent();
  void on_read(int64_t start, int64_t end);
  Err handshake_failed(int ret, uint32_t timeout_ms);
  Err verify_failed();
  Err alert_failed(const char* offered);
  Err fail(int ret, Err fallback, const char* what);
  void offered_names(char* out, size_t cap) const;
  Err install_keylog();
  void save_ticket_session();
  void keylog(const char* label, const unsigned char* client_random, const unsigned char* secret, size_t len);

  static int bio_send(void* ctx, const unsigned char* buf, size_t len);
  static int bio_recv_timeout(void* ctx, unsigned char* buf, size_t len, uint32_t timeout_ms);
#if defined(TB_MBEDTLS3)
  static void export_keys(void* ctx, mbedtls_ssl_key_export_type type, const unsigned char* secret, size_t len,
                          const unsigned char client_random[32], const unsigned char server_random[32],
                          mbedtls_tls_prf_types prf);
#elif defined(MBEDTLS_SSL_EXPORT_KEYS)
  static int export_keys(void* ctx, const unsigned char* ms, const unsigned char* kb, size_t maclen,
                         size_t keylen, size_t ivlen, const unsigned char client_random[32],
                         const unsigned char server_random[32], mbedtls_tls_prf_types prf);
#endif

  Clock& clock_;
  TlsOptions opt_;
  PlainTcp tcp_;
  ErrorText err_;
  TransportStats stats_;
  bool configured_ = false;
  bool setup_attempted_ = false;
  bool open_ = false;
  int cipher_list_[kMaxCiphers + 1] = {0};  // zero-terminated, kept alive for mbedtls_ssl_conf_ciphersuites
  size_t cipher_count_ = 0;
  bool tls12_ = true;   // the list has a TLS 1.2 suite
  bool tls13_ = false;  // the list has a TLS 1.3 suite (mbedTLS 3.x only)
  SessionResumption resumption_ = SessionResumption::None;
  // HandshakePhases::busy_us, counted from TCP connected to the first application write (on_sent, on_read)
  bool timing_ = false;
  int64_t stretch_us_ = 0;  // mono start of the device's current busy stretch
  int64_t read_us_ = 0;     // time in reads inside it
  bool sent_ = false;       // it began at a send: the first read that ends restarts it
  int64_t busy_us_ = 0;      // the stretches so far
  bool saw_certificate_ = false;  // 3.x: this handshake reached the server's Certificate (not a PSK one)
  bool have_saved_ = false;                 // saved_ holds the session of the last completed handshake
  unsigned char offered_master_[48] = {0};  // the master secret of the session offered in this handshake

  mbedtls_entropy_context entropy_;
  mbedtls_ctr_drbg_context drbg_;
  mbedtls_x509_crt ca_;
  mbedtls_x509_crt client_cert_;
  mbedtls_pk_context client_key_;
  mbedtls_ssl_config conf_;
  mbedtls_ssl_context ssl_;
  mbedtls_ssl_session saved_;
};

}  // namespace tb
