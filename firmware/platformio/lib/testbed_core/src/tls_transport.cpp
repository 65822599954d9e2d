#include "tls_transport.h"

#include <cstdio>
#include <cstring>

#include "mbedtls/error.h"
#include "mbedtls/net_sockets.h"  // MBEDTLS_ERR_NET_* codes for the BIO callbacks
#include "mbedtls/ssl_ciphersuites.h"
#include "mbedtls/version.h"

namespace tb {
namespace {

const char kPers[] = "testbed-tls-client";

const char* alert_name(unsigned char desc) {
  switch (desc) {
    case 0: return "close_notify";
    case 10: return "unexpected_message";
    case 20: return "bad_record_mac";
    case 40: return "handshake_failure";
    case 42: return "bad_certificate";
    case 43: return "unsupported_certificate";
    case 45: return "certificate_expired";
    case 46: return "certificate_unknown";
    case 47: return "illegal_parameter";
    case 48: return "unknown_ca";
    case 50: return "decode_error";
    case 51: return "decrypt_error";
    case 70: return "protocol_version";
    case 71: return "insufficient_security";
    case 80: return "internal_error";
    case 109: return "missing_extension";
    case 112: return "unrecognized_name";
    case 116: return "certificate_required";
    case 120: return "no_application_protocol";
    default: return "alert";
  }
}

// "TLS 1.1" for a TLS 1.x minor version (3.0 = SSL 3.0).
const char* version_name(int major, int minor) {
  if (major != 3) return "an unknown version";
  switch (minor) {
    case 0: return "SSL 3.0";
    case 1: return "TLS 1.0";
    case 2: return "TLS 1.1";
    case 3: return "TLS 1.2";
    case 4: return "TLS 1.3";
    default: return "a later TLS version";
  }
}

// What this device speaks, for the version errors: its suites decide (tls_compat.h conf_versions).
const char* spoken(bool tls12, bool tls13) {
  return tls12 && tls13 ? "TLS 1.2 and TLS 1.3, the versions" : tls13 ? "TLS 1.3, the only version" : "TLS 1.2, the only version";
}

}  // namespace

TlsTransport::TlsTransport(Clock& clock, const TlsOptions& options) : clock_(clock), opt_(options), tcp_(clock) {
  init_contexts();
}

TlsTransport::~TlsTransport() {
  close();
  free_contexts();
}

void TlsTransport::init_contexts() {
  mbedtls_entropy_init(&entropy_);
  mbedtls_ctr_drbg_init(&drbg_);
  mbedtls_x509_crt_init(&ca_);
  mbedtls_x509_crt_init(&client_cert_);
  mbedtls_pk_init(&client_key_);
  mbedtls_ssl_config_init(&conf_);
  mbedtls_ssl_init(&ssl_);
  mbedtls_ssl_session_init(&saved_);
}

void TlsTransport::free_contexts() {
  mbedtls_ssl_session_free(&saved_);
  mbedtls_ssl_free(&ssl_);
  mbedtls_ssl_config_free(&conf_);
  mbedtls_pk_free(&client_key_);
  mbedtls_x509_crt_free(&client_cert_);
  mbedtls_x509_crt_free(&ca_);
  mbedtls_ctr_drbg_free(&drbg_);
  mbedtls_entropy_free(&entropy_);
}

Err TlsTransport::fail(int ret, Err fallback, const char* what) {
  char detail[160];
  mbedtls_strerror(ret, detail, sizeof(detail));
  err_.set("%s: mbedTLS -0x%04x %s", what, static_cast<unsigned>(-ret), detail);
  return fallback;
}

void TlsTransport::offered_names(char* out, size_t cap) const {
  size_t pos = 0;
  out[0] = '\0';
  for (size_t i = 0; i < cipher_count_; ++i) {
    const char* name = cipher_iana_name(static_cast<uint16_t>(cipher_list_[i]));
    int n = snprintf(out + pos, cap - pos, "%s%s", i ? "," : "", name ? name : "?");
    if (n < 0 || static_cast<size_t>(n) >= cap - pos) break;
    pos += static_cast<size_t>(n);
  }
}

Err check_ciphers_compiled(const uint16_t* ids, size_t count, ErrorText* err) {
  for (size_t i = 0; i < count; ++i) {
    if (mbedtls_ssl_ciphersuite_from_id(ids[i]) == nullptr) {
      err->set("cipher suite %s is not compiled into this mbedTLS (%s)", cipher_iana_name(ids[i]),
               MBEDTLS_VERSION_STRING_FULL);
      return Err::CipherNotCompiled;
    }
  }
  return Err::Ok;
}

Err TlsTransport::configure(const char* host) {
  if (opt_.ca_pem == nullptr) {
    err_.set("TLS needs a CA certificate to verify the broker");
    return Err::InvalidArgument;
  }
  if ((opt_.client_cert_pem == nullptr) != (opt_.client_key_pem == nullptr)) {
    err_.set("mutual TLS needs both a client certificate and its key");
    return Err::InvalidArgument;
  }
  uint16_t ids[kMaxCiphers];
  Err e = parse_cipher_list(opt_.ciphers, ids, kMaxCiphers, &cipher_count_, &err_);
  if (e != Err::Ok) return e;
  e = check_ciphers_compiled(ids, cipher_count_, &err_);
  if (e != Err::Ok) return e;
  tls12_ = tls13_ = false;
  for (size_t i = 0; i < cipher_count_; ++i) {
    (tlsc::is_tls13_suite(ids[i]) ? tls13_ : tls12_) = true;
    cipher_list_[i] = ids[i];
  }
  cipher_list_[cipher_count_] = 0;
  e = load_credentials();
  if (e != Err::Ok) return e;
  return setup_ssl(host);
}

// The random generator, the CA and the optional client certificate and key.
Err TlsTransport::load_credentials() {
  int ret = tlsc::crypto_init();
  if (ret != 0) return fail(ret, Err::TlsRng, "psa_crypto_init failed");
  ret = mbedtls_ctr_drbg_seed(&drbg_, mbedtls_entropy_func, &entropy_,
                                  reinterpret_cast<const unsigned char*>(kPers), sizeof(kPers) - 1);
  if (ret != 0) return fail(ret, Err::TlsRng, "seeding the random generator failed");

  ret = mbedtls_x509_crt_parse(&ca_, reinterpret_cast<const unsigned char*>(opt_.ca_pem), strlen(opt_.ca_pem) + 1);
  if (ret < 0) return fail(ret, Err::TlsCaParse, "CA certificate does not parse");
  if (ret > 0 || ca_.version == 0) {
    err_.set("CA certificate: %d certificate(s) in the file did not parse", ret);
    return Err::TlsCaParse;
  }
  if (opt_.client_cert_pem != nullptr) {
    ret = mbedtls_x509_crt_parse(&client_cert_, reinterpret_cast<const unsigned char*>(opt_.client_cert_pem),
                                 strlen(opt_.client_cert_pem) + 1);
    if (ret != 0) {
      return ret < 0 ? fail(ret, Err::TlsCertParse, "client certificate does not parse")
                     : (err_.set("client certificate: %d certificate(s) did not parse", ret), Err::TlsCertParse);
    }
    ret = tlsc::pk_parse_key(&client_key_, reinterpret_cast<const unsigned char*>(opt_.client_key_pem),
                             strlen(opt_.client_key_pem) + 1, mbedtls_ctr_drbg_random, &drbg_);
    if (ret != 0) return fail(ret, Err::TlsKeyParse, "client key does not parse");
  }
  return Err::Ok;
}

// The client configuration (the versions and suites listed, verification) and the SSL context on it.
Err TlsTransport::setup_ssl(const char* host) {
  int ret = mbedtls_ssl_config_defaults(&conf_, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                    MBEDTLS_SSL_PRESET_DEFAULT);
  if (ret != 0) return fail(ret, Err::TlsSetup, "mbedtls_ssl_config_defaults failed");
  mbedtls_ssl_conf_authmode(&conf_, MBEDTLS_SSL_VERIFY_REQUIRED);
  mbedtls_ssl_conf_ca_chain(&conf_, &ca_, nullptr);
  mbedtls_ssl_conf_rng(&conf_, mbedtls_ctr_drbg_random, &drbg_);
  mbedtls_ssl_conf_ciphersuites(&conf_, cipher_list_);
  tlsc::conf_versions(&conf_, tls12_, tls13_);
  if (opt_.client_cert_pem != nullptr) {
    ret = mbedtls_ssl_conf_own_cert(&conf_, &client_cert_, &client_key_);
    if (ret != 0) return fail(ret, Err::TlsSetup, "client certificate and key do not belong together");
  }
  if (resumption_ != SessionResumption::None) apply_resumption();  // None: mbedTLS's client defaults

  ret = mbedtls_ssl_setup(&ssl_, &conf_);
  if (ret != 0) return fail(ret, Err::TlsSetup, "mbedtls_ssl_setup failed");
  Err e = install_keylog();
  if (e != Err::Ok) return e;
  const char* name = opt_.server_name != nullptr ? opt_.server_name : host;
  ret = mbedtls_ssl_set_hostname(&ssl_, name);
  if (ret != 0) return fail(ret, Err::TlsSetup, "server name for verification refused");
  mbedtls_ssl_set_bio(&ssl_, this, &TlsTransport::bio_send, nullptr, &TlsTransport::bio_recv_timeout);
  configured_ = true;
  return Err::Ok;
}

Err TlsTransport::open(const char* host, uint16_t port, uint32_t timeout_ms) {
  err_.clear();
  if (open_) abort();
  stats_ = TransportStats();
  timing_ = false;
  if (!configured_ && setup_attempted_) {
    err_.set("the TLS configuration failed before: this transport cannot connect");
    return Err::TlsSetup;
  }
  Err e = check_resumption();
  if (e != Err::Ok) return e;
  setup_attempted_ = true;
  e = configured_ ? reopen(host) : configure(host);
  if (e != Err::Ok) return e;
  e = tcp_.open(host, port, timeout_ms);
  stats_.tcp_connect_us = tcp_.stats().tcp_connect_us;
  if (e != Err::Ok) {
    err_.set("%s", tcp_.error_text());
    return e;
  }
  open_ = true;
  stretch_us_ = clock_.mono_us();  // TCP connected: the device's first stretch (to its ClientHello) starts
  read_us_ = 0;
  sent_ = false;
  busy_us_ = 0;
  timing_ = true;
  return handshake(timeout_ms);
}

Err TlsTransport::handshake(uint32_t timeout_ms) {
  mbedtls_ssl_conf_read_timeout(&conf_, timeout_ms);
  Err e = offer_session();
  if (e != Err::Ok) return e;
  int64_t start = clock_.mono_us();
  int ret = step_handshake(start);
  int64_t elapsed = clock_.mono_us() - start;
  if (ret == 0) {
    stats_.handshake_us = elapsed;
    snprintf(stats_.tls_version, sizeof(stats_.tls_version), "%s", mbedtls_ssl_get_version(&ssl_));
    const char* mbed_name = mbedtls_ssl_get_ciphersuite(&ssl_);
    int id = mbed_name ? mbedtls_ssl_get_ciphersuite_id(mbed_name) : 0;
    stats_.cipher_id = static_cast<uint16_t>(id);
    const char* iana = cipher_iana_name(stats_.cipher_id);
    snprintf(stats_.cipher_suite, sizeof(stats_.cipher_suite), "%s", iana ? iana : (mbed_name ? mbed_name : "?"));
    return after_handshake();
  }
  return handshake_failed(ret, timeout_ms);
}

// The broker's certificate chain or name did not verify: which, by mbedTLS's verify flags, named in
// this order: another CA (nothing else about the certificate is then worth trusting), its validity, its name.
Err TlsTransport::verify_failed() {
  uint32_t flags = mbedtls_ssl_get_verify_result(&ssl_);
  char info[200];
  int n = mbedtls_x509_crt_verify_info(info, sizeof(info), "", flags);
  if (n < 0) info[0] = '\0';
  for (char* p = info; *p; ++p) {
    if (*p == '\n') *p = (p[1] == '\0') ? '\0' : ';';
  }
  const unsigned f = static_cast<unsigned>(flags);
  if (flags & MBEDTLS_X509_BADCERT_NOT_TRUSTED) {
    err_.set("TLS handshake failed: the broker certificate does not chain to the CA given to the device "
             "(verify flags 0x%08x: %s)", f, info);
    return Err::TlsCertUntrusted;
  }
  if (flags & MBEDTLS_X509_BADCERT_EXPIRED) {
    err_.set("TLS handshake failed: the broker certificate has expired (verify flags 0x%08x: %s)", f, info);
    return Err::TlsCertExpired;
  }
  if (flags & MBEDTLS_X509_BADCERT_FUTURE) {
    err_.set("TLS handshake failed: the broker certificate is not valid yet: is the device clock set? "
             "(verify flags 0x%08x: %s)", f, info);
    return Err::TlsCertNotYetValid;
  }
  if (flags & MBEDTLS_X509_BADCERT_CN_MISMATCH) {
    const char* hn = tlsc::hostname(&ssl_);
    const char* name = hn ? hn : "";
    bool numeric = name[0] != '\0' && strspn(name, "0123456789.") == strlen(name);
    err_.set("TLS handshake failed: the broker certificate does not match the server name \"%s\" (verify flags "
             "0x%08x: %s)%s", name, f, info, numeric ? "; mbedTLS 2.28 matches DNS names only: give a DNS name "
             "of the certificate as the server name (e.g. broker)" : "");
    return Err::TlsHostname;
  }
  err_.set("TLS handshake failed: broker certificate not trusted (verify flags 0x%08x: %s)", f, info);
  return Err::TlsCertVerify;
}

// A fatal alert from the broker. Before its ServerHello, the alert's record version tells why: an
// OpenSSL server writes it in the version it chose, so a record below TLS 1.2 means the broker runs an
// older version only (every suite of this device needs TLS 1.2: none can be agreed at 1.0/1.1).
Err TlsTransport::alert_failed(const char* offered) {
  const unsigned char* msg = tlsc::in_msg(&ssl_);
  const unsigned char* hdr = tlsc::in_hdr(&ssl_);
  unsigned char desc = msg != nullptr ? msg[1] : 0;
  bool before_server_hello = tlsc::state(&ssl_) <= MBEDTLS_SSL_SERVER_HELLO;
  int rec_major = hdr != nullptr ? hdr[1] : 3;
  int rec_minor = hdr != nullptr ? hdr[2] : 3;
  if (before_server_hello && (rec_major != 3 || rec_minor < 3)) {
    err_.set("TLS handshake failed: the broker answered the ClientHello in %s (record version 0x%02x%02x) with "
             "alert %s (%u): it does not run %s this device speaks",
             version_name(rec_major, rec_minor), rec_major, rec_minor, alert_name(desc), desc, spoken(tls12_, tls13_));
    return Err::TlsVersion;
  }
  if (desc == MBEDTLS_SSL_ALERT_MSG_HANDSHAKE_FAILURE && before_server_hello) {
    err_.set("TLS handshake failed: no shared cipher suite (the broker answered the ClientHello with alert "
             "handshake_failure), offered: %s",
             offered);
    return Err::TlsNoSharedCipher;
  }
  if (desc == MBEDTLS_SSL_ALERT_MSG_PROTOCOL_VERSION) {
    err_.set("TLS handshake failed: the broker refused %s this device speaks (alert protocol_version)",
             spoken(tls12_, tls13_));
    return Err::TlsVersion;
  }
  err_.set("TLS handshake failed: the broker sent alert %s (%u)%s, offered: %s", alert_name(desc), desc,
           before_server_hello ? " in answer to the ClientHello" : "", offered);
  return Err::TlsAlert;
}

// A failed mbedtls_ssl_handshake(): its return code as a named tb::Err with the cause spelled out.
Err TlsTransport::handshake_failed(int ret, uint32_t timeout_ms) {
  if (ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) return verify_failed();
  char offered[kMaxCiphers * 48];
  offered_names(offered, sizeof(offered));
  if (ret == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE) return alert_failed(offered);
  if (ret == tlsc::kErrBadProtocolVersion) {
    int v = tlsc::version_number(&ssl_);
    err_.set("TLS handshake failed: the broker chose %s in its ServerHello: it does not run %s this device "
             "speaks", version_name(v >> 8, v & 0xFF), spoken(tls12_, tls13_));
    return Err::TlsVersion;
  }
  if (ret == MBEDTLS_ERR_SSL_TIMEOUT) {
    err_.set("TLS handshake timed out after %u ms", static_cast<unsigned>(timeout_ms));
    return Err::RecvTimeout;
  }
  if (ret == MBEDTLS_ERR_SSL_CONN_EOF || ret == MBEDTLS_ERR_NET_CONN_RESET) {
    return fail(ret, Err::PeerClosed, "TLS handshake failed: the broker closed the connection");
  }
  return fail(ret, Err::TlsHandshake, "TLS handshake failed");
}

Err TlsTransport::write_all(const uint8_t* data, size_t len) {
  if (!open_) {
    err_.set("write on a closed TLS connection");
    return Err::NotConnected;
  }
  if (timing_) {  // the first application write (the CONNECT): the device's own set-up time ends
    on_sent();
    timing_ = false;
    stats_.phases.busy_us = busy_us_;
  }
  size_t done = 0;
  while (done < len) {
    int ret = mbedtls_ssl_write(&ssl_, data + done, len - done);
    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
    if (ret < 0) {
      if (ret == MBEDTLS_ERR_NET_CONN_RESET) return fail(ret, Err::PeerClosed, "TLS write failed");
      return fail(ret, Err::TlsWrite, "TLS write failed");
    }
    done += static_cast<size_t>(ret);
  }
  return Err::Ok;
}

Err TlsTransport::read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  *got = 0;
  if (!open_) {
    err_.set("read on a closed TLS connection");
    return Err::NotConnected;
  }
  mbedtls_ssl_conf_read_timeout(&conf_, timeout_ms);
  while (true) {
    int ret = mbedtls_ssl_read(&ssl_, buf, cap);
    if (ret > 0) {
      *got = static_cast<size_t>(ret);
      return Err::Ok;
    }
    if (ret == MBEDTLS_ERR_SSL_WANT_READ || ret == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
#if defined(MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET)
    if (ret == MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET) {  // TLS 1.3: a ticket after the handshake
      save_ticket_session();
      continue;
    }
#endif
    if (ret == 0 || ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || ret == MBEDTLS_ERR_NET_CONN_RESET ||
        ret == MBEDTLS_ERR_SSL_CONN_EOF) {
      err_.set("the broker closed the TLS connection");
      return Err::PeerClosed;
    }
    if (ret == MBEDTLS_ERR_SSL_TIMEOUT) {
      err_.set("no data from the broker within %u ms", static_cast<unsigned>(timeout_ms));
      return Err::RecvTimeout;
    }
    return fail(ret, Err::TlsRead, "TLS read failed");
  }
}

void TlsTransport::close() {
  if (open_) {
    int ret;
    do {
      ret = mbedtls_ssl_close_notify(&ssl_);
    } while (ret == MBEDTLS_ERR_SSL_WANT_WRITE);
    if (ret != 0 && err_.empty()) fail(ret, Err::TlsWrite, "TLS close_notify failed");
    open_ = false;
  }
  tcp_.close();
}

int TlsTransport::bio_send(void* ctx, const unsigned char* buf, size_t len) {
  auto* self = static_cast<TlsTransport*>(ctx);
  if (self->timing_) self->on_sent();
  Err e = self->tcp_.write_all(buf, len);
  if (e == Err::Ok) return static_cast<int>(len);
  return e == Err::PeerClosed ? MBEDTLS_ERR_NET_CONN_RESET : MBEDTLS_ERR_NET_SEND_FAILED;
}

int TlsTransport::bio_recv_timeout(void* ctx, unsigned char* buf, size_t len, uint32_t timeout_ms) {
  auto* self = static_cast<TlsTransport*>(ctx);
  size_t got = 0;
  int64_t t0 = self->timing_ ? self->clock_.mono_us() : 0;
  // timeout 0 means "block" in mbedTLS; cap it so a dead broker cannot hang the device forever.
  Err e = self->tcp_.read_some(buf, len, &got, timeout_ms == 0 ? 3600000u : timeout_ms);
  if (self->timing_) self->on_read(t0, self->clock_.mono_us());
  switch (e) {
    case Err::Ok: return static_cast<int>(got);
    case Err::RecvTimeout: return MBEDTLS_ERR_SSL_TIMEOUT;
    case Err::PeerClosed: return 0;  // EOF
    default: return MBEDTLS_ERR_NET_RECV_FAILED;
  }
}

}  // namespace tb
