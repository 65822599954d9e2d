#include "board_session.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

#include "cipher_suites.h"
#include "mbedtls/version.h"

namespace tb {
namespace {

constexpr uint32_t kReadChunk = 64;

bool starts_word(const char* text, const char* word, const char** rest) {
  size_t n = strlen(word);
  if (strncmp(text, word, n) != 0 || (text[n] != '\0' && text[n] != ' ')) return false;
  *rest = text + n + (text[n] == ' ' ? 1 : 0);
  return true;
}

// A banner value: spaces (which would split the field) become '_', empty becomes '-'.
void banner_value(const char* in, char* out, size_t cap) {
  if (in == nullptr || in[0] == '\0') in = "-";
  size_t i = 0;
  for (; in[i] != '\0' && i + 1 < cap; ++i) out[i] = (in[i] == ' ' || in[i] == '\n' || in[i] == '\r') ? '_' : in[i];
  out[i] = '\0';
}

// Microseconds as milliseconds with three decimals ("12.345"), "-" when unknown (negative).
void fmt_ms(int64_t us, char* out, size_t cap) {
  if (us < 0) {
    snprintf(out, cap, "-");
    return;
  }
  snprintf(out, cap, "%" PRId64 ".%03" PRId64, us / 1000, us % 1000);
}

// " hello_ms=.. flight_ms=.. verified_ms=.. kex_ms=.. finished_ms=.. busy_ms=..": the device's own TLS handshake
// phases (HandshakePhases; "-" where not reached), fields a host that does not know them ignores; printed for a TLS
// connection only. A transport that runs the handshake whole (the WiFiClientSecure env) has none: every one is "-".
void fmt_phases(const HandshakePhases& p, char* out, size_t cap) {
  char v[6][24];
  const int64_t us[6] = {p.hello_sent_us, p.flight_in_us, p.verified_us, p.kex_done_us, p.finished_sent_us,
                         p.busy_us};
  for (int i = 0; i < 6; ++i) fmt_ms(us[i], v[i], sizeof(v[i]));
  snprintf(out, cap, " hello_ms=%s flight_ms=%s verified_ms=%s kex_ms=%s finished_ms=%s busy_ms=%s", v[0], v[1],
           v[2], v[3], v[4], v[5]);
}

}  // namespace

// ------------------------------------------------------------------ the transport the Publisher sees
Err BoardSession::BoardTransport::open(const char* host, uint16_t p, uint32_t timeout_ms) {
  return inner_ != nullptr ? inner_->open(host, p, timeout_ms) : Err::NotConnected;
}

Err BoardSession::BoardTransport::write_all(const uint8_t* data, size_t len) {
  if (inner_ == nullptr) return Err::NotConnected;
  port_.before_send();
  return inner_->write_all(data, len);
}

Err BoardSession::BoardTransport::read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) {
  return inner_ != nullptr ? inner_->read_some(buf, cap, got, timeout_ms) : Err::NotConnected;
}

void BoardSession::BoardTransport::close() {
  if (inner_ != nullptr) inner_->close();
}

void BoardSession::BoardTransport::abort() {
  if (inner_ != nullptr) inner_->abort();
}

void BoardSession::BoardTransport::set_resumption(SessionResumption r) {
  if (inner_ != nullptr) inner_->set_resumption(r);
}

Err BoardSession::BoardTransport::keep_session(KeptSession* out) {
  if (inner_ == nullptr) {
    out->clear();
    return Err::Ok;
  }
  return inner_->keep_session(out);
}

Err BoardSession::BoardTransport::restore_session(const KeptSession& in) {
  return inner_ != nullptr ? inner_->restore_session(in) : Err::Ok;
}

void BoardSession::BoardTransport::power_off() {
  if (inner_ != nullptr) inner_->power_off();
}

const char* BoardSession::BoardTransport::error_text() const {
  return inner_ != nullptr ? inner_->error_text() : "no transport";
}

const TransportStats& BoardSession::BoardTransport::stats() const {
  return inner_ != nullptr ? inner_->stats() : none_;
}

// ------------------------------------------------------------------ session
BoardSession::BoardSession(ByteStream& io, Clock& clock, SensorSource& sensors, BoardPort& port,
                           const BoardInfo& info, Datagram* sync)
    : io_(io),
      clock_(clock),
      port_(port),
      info_(info),
      sync_(sync),
      board_transport_(port),
      publisher_(board_transport_, clock, sensors, *this) {
  in_[0] = '\0';
  out_[0] = '\0';
  publisher_.set_driver_stop_flag(&host_stop_);
  publisher_.set_between(this);
  publisher_.set_marker(this);
  rtc_.clear();
}

Err BoardSession::sleep(SleepMode mode, int64_t due_mono_us) {
  int kept = 0;
  Err e = port_.sleep_between(mode, due_mono_us, board_transport_, &rtc_, &kept);
  ++sleeps_;
  kept_ += static_cast<uint32_t>(kept);
  return e;
}

BoardSession::~BoardSession() { release_transport(); }

void BoardSession::line(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out_, sizeof(out_) - 1, fmt, ap);
  va_end(ap);
  size_t len = n < 0 ? 0 : (static_cast<size_t>(n) < sizeof(out_) - 1 ? static_cast<size_t>(n) : sizeof(out_) - 2);
  out_[len++] = '\n';
  io_.write(reinterpret_cast<const uint8_t*>(out_), len);
}

void BoardSession::error(Err e, const char* text) {
  char clean[ErrorText::kCapacity];  // one line whatever the message holds
  size_t i = 0;
  for (; text[i] != '\0' && i + 1 < sizeof(clean); ++i) clean[i] = (text[i] == '\n' || text[i] == '\r') ? ' ' : text[i];
  clean[i] = '\0';
  line("%s %s: %s", proto::kLineError, err_name(e), clean);
}

void BoardSession::banner() {
  char v[14][72];
  banner_value(info_.board, v[0], sizeof(v[0]));
  banner_value(info_.chip, v[1], sizeof(v[1]));
  banner_value(info_.mac, v[2], sizeof(v[2]));
  banner_value(info_.fw, v[3], sizeof(v[3]));
  banner_value(info_.arduino, v[4], sizeof(v[4]));
  banner_value(info_.idf, v[5], sizeof(v[5]));
  banner_value(info_.mbedtls != nullptr ? info_.mbedtls : MBEDTLS_VERSION_STRING, v[6], sizeof(v[6]));
  banner_value(info_.wifi_ps, v[7], sizeof(v[7]));
  banner_value(info_.hw_crypto, v[8], sizeof(v[8]));
  banner_value(info_.sw_crypto, v[9], sizeof(v[9]));
  banner_value(info_.device_id, v[10], sizeof(v[10]));
  line("%s proto=%" PRIu32 " board=%s chip=%s mac=%s fw=%s arduino=%s idf=%s mbedtls=%s cpu_mhz=%" PRIu32
       " wifi_ps=%s hw_crypto=%s sw_crypto=%s rx_buf=%" PRIu32 " device=%s",
       proto::kLineBanner, info_.protocol, v[0], v[1], v[2], v[3], v[4], v[5], v[6], info_.cpu_mhz, v[7], v[8],
       v[9], info_.rx_buf, v[10]);
}

void BoardSession::ready() { line("%s", proto::kLineReady); }

Err BoardSession::poll(uint32_t timeout_ms) {
  uint8_t buf[kReadChunk];
  size_t got = 0;
  Err e = io_.read(buf, sizeof(buf), &got, timeout_ms);
  if (e == Err::PeerClosed) return e;
  int64_t now = clock_.mono_us();
  if (e != Err::Ok) {
    if (receiver_.active() && now - last_rx_us_ > static_cast<int64_t>(proto::kTransferTimeoutMs) * 1000) {
      receiver_.reset();
      error(Err::TransferTimeout, "no RUN line within 10000 ms: the transfer is dropped, send RUN BEGIN again");
      ready();
    }
    return Err::Ok;
  }
  last_rx_us_ = now;
  for (size_t i = 0; i < got; ++i) {
    char c = static_cast<char>(buf[i]);
    if (c != '\n') {
      if (in_len_ + 1 < proto::kMaxHostLine) {
        in_[in_len_++] = c;
      } else {
        in_overflow_ = true;
      }
      continue;
    }
    if (in_len_ > 0 && in_[in_len_ - 1] == '\r') --in_len_;
    in_[in_len_] = '\0';
    bool overflow = in_overflow_;
    in_len_ = 0;
    in_overflow_ = false;
    if (overflow) {
      receiver_.reset();
      err_.set("a host line is longer than %u bytes (send RUN bodies in chunks)",
               static_cast<unsigned>(proto::kMaxHostLine));
      error(Err::LineTooLong, err_.c_str());
      ready();
      continue;
    }
    handle_line(in_);
    last_rx_us_ = clock_.mono_us();
  }
  return Err::Ok;
}

void BoardSession::handle_line(char* text) {
  if (text[0] == '\0') return;  // an empty line wakes nobody up
  const char* rest = nullptr;
  if (starts_word(text, proto::kCmdHello, &rest)) {
    receiver_.reset();
    boot();
    return;
  }
  if (starts_word(text, proto::kCmdRun, &rest)) {
    handle_run_line(rest);
    return;
  }
  if (strcmp(text, proto::kCmdStop) == 0) {  // no run to stop (it ended as the host sent this): READY
    ready();
    return;
  }
  receiver_.reset();
  size_t n = strcspn(text, " ");
  err_.set("unknown command \"%.*s\" (HELLO, RUN, STOP)", static_cast<int>(n < 24 ? n : 24), text);
  error(Err::UnknownCommand, err_.c_str());
  ready();
}

void BoardSession::handle_run_line(const char* args) {
  proto::RunReceiver::Step step;
  Err e = receiver_.feed(args, &step, &err_);
  if (e != Err::Ok) {
    error(e, err_.c_str());
    ready();
    return;
  }
  switch (step) {
    case proto::RunReceiver::Step::AckBegin:
      line("%s %s", proto::kLineAck, proto::kAckBegin);
      return;
    case proto::RunReceiver::Step::AckChunk:
      line("%s %s i=%" PRIu32, proto::kLineAck, proto::kAckChunk, receiver_.chunk_index());
      return;
    case proto::RunReceiver::Step::Aborted:
      line("%s %s", proto::kLineAck, proto::kAckAbort);
      ready();
      return;
    case proto::RunReceiver::Step::Complete:
      break;
    case proto::RunReceiver::Step::None:
      return;
  }
  DeviceConfig request(TB_BOARD);
  e = proto::parse_run_body(receiver_.body(), receiver_.body_len(), &request, &err_);
  if (e != Err::Ok) {
    error(e, err_.c_str());
    ready();
    return;
  }
  execute(request);
  ready();
}

Err BoardSession::check_run(char* body, size_t len, DeviceConfig* run) {
  DeviceConfig request(TB_BOARD);
  Err e = proto::parse_run_body(body, len, &request, &err_);
  if (e != Err::Ok) return e;
  if (run != nullptr) *run = request;
  PublishConfig cfg(request);
  e = prepare(request, &cfg);
  release_transport();
  return e;
}

void BoardSession::release_transport() {
  board_transport_.set(nullptr);
  if (attached_filter_ != nullptr) {
    attached_filter_->detach();
    attached_filter_ = nullptr;
  }
  if (transport_ != nullptr) {
    transport_->~Transport();
    transport_ = nullptr;
  }
}

// Checks the RUN against this board and builds the publish configuration and the transport.
Err BoardSession::prepare(const DeviceConfig& r, PublishConfig* cfg) {
  if (r.given(opt::Id::sync_host) && sync_ == nullptr) {
    err_.set("this board has no datagram socket for the clock exchanges (sync_host)");
    return Err::InvalidArgument;
  }
  *cfg = PublishConfig(r);  // the run's options; then what this board decides itself
  if (!r.given(opt::Id::device_id) && info_.device_id != nullptr) cfg->device_id = info_.device_id;
  if (!r.given(opt::Id::topic) && info_.topic != nullptr) cfg->topic = info_.topic;
  if (!r.given(opt::Id::client_id)) cfg->client_id = cfg->device_id;
  cfg->drain_timeout_ms = kDrainTimeoutMs;
  if (strcmp(r.transport, "tls") == 0) {
    uint16_t ids[kMaxCiphers];
    size_t count = 0;
    Err e = parse_cipher_list(r.ciphers, ids, kMaxCiphers, &count, &err_);
    if (e == Err::Ok) e = check_ciphers_compiled(ids, count, &err_);
    if (e != Err::Ok) return e;
    TlsOptions tls;
    tls.ca_pem = r.given_text(opt::Id::ca);
    tls.client_cert_pem = r.given_text(opt::Id::cert);
    tls.client_key_pem = r.given_text(opt::Id::key);
    tls.server_name = r.given_text(opt::Id::server_name);
    tls.ciphers = r.ciphers;
    tls.keylog = proto::run_keylog(r) ? static_cast<KeylogSink*>(this) : nullptr;
    transport_ = new (transport_mem_) TlsTransport(clock_, tls);
  } else {
    transport_ = new (transport_mem_) PlainTcp(clock_);
  }
  Transport* used = transport_;
  if (filter_ != nullptr) {
    attached_filter_ = filter_;
    Transport* filtered = filter_->attach(*transport_);
    if (filtered != nullptr) used = filtered;
  }
  board_transport_.set(used);
  Err e = publisher_.validate(*cfg);
  if (e != Err::Ok) err_.set("%s", publisher_.error_text());
  return e;
}

void BoardSession::execute(const DeviceConfig& r) {
  PublishConfig cfg(r);
  Err e = prepare(r, &cfg);
  if (e != Err::Ok) {
    release_transport();
    error(e, err_.c_str());
    return;
  }
  ++runs_;
  line("%s %s id=%s", proto::kLineAck, proto::kAckRun, r.id);
  if (r.given(opt::Id::sync_host)) clock_exchange(r, "pre");
  handshake_printed_ = false;
  mode_ = cfg.mode;
  host_stop_ = 0;
  stop_len_ = 0;
  heap_before_ = port_.free_heap();
  port_.power_save(cfg.power_save);
  sleeps_ = kept_ = 0;
  rtc_.clear();
  e = publisher_.run(cfg, &stats_);
  if (!handshake_printed_) print_handshake();
  if (e != Err::Ok) err_.set("%s", publisher_.error_text());
  release_transport();
  if (r.given(opt::Id::sync_host)) clock_exchange(r, "post");
  if (e != Err::Ok) {
    error(e, err_.c_str());
    return;
  }
  char session[96] = "";  // a persistent session's reconnects and resends (version 3): old runs' DONE unchanged
  if (!cfg.clean_session) {
    snprintf(session, sizeof(session), " reconnects=%" PRIu32 " resent=%" PRIu32 " lost=%" PRIu32, stats_.reconnects,
             stats_.resent, stats_.lost);
  }
  line("%s sent=%" PRIu32 " id=%s%s", proto::kLineDone, stats_.messages_sent, r.id, session);
}

void BoardSession::clock_exchange(const DeviceConfig& r, const char* phase) {
  uint32_t got = 0;
  const uint32_t count = static_cast<uint32_t>(r.sync_count);
  Err e = time_sync(*sync_, clock_, r.sync_host, static_cast<uint16_t>(r.sync_port), count, samples_, &got);
  for (uint32_t i = 0; i < got; ++i) {
    const TimeSample& s = samples_[i];
    line("%s phase=%s i=%" PRIu32 " t1=%" PRId64 " t2=%" PRId64 " t3=%" PRId64 " t4=%" PRId64, proto::kLineClock,
         phase, i, s.t1_us, s.t2_us, s.t3_us, s.t4_us);
  }
  line("%s phase=%s count=%" PRIu32 " got=%" PRIu32 " status=%s", proto::kLineSync, phase, count, got,
       err_name(e));
}

void BoardSession::print_handshake() {
  handshake_printed_ = true;
  const TransportStats& ts = board_transport_.stats();
  char tcp[24], tls[24], connack[24];
  fmt_ms(stats_.tcp_connect_us, tcp, sizeof(tcp));
  fmt_ms(stats_.handshake_us, tls, sizeof(tls));
  fmt_ms(stats_.connack_us, connack, sizeof(connack));
  char phases[224] = "";  // TLS only: a plain connection has no handshake
  if (ts.tls_version[0] != '\0') fmt_phases(ts.phases, phases, sizeof(phases));
  line("%s tcp_ms=%s tls_ms=%s connack_ms=%s version=%s suite=%s min_heap=%" PRIu32 " heap_before=%" PRIu32 "%s",
       proto::kLineHandshake, tcp, tls, connack, ts.tls_version[0] ? ts.tls_version : "-",
       ts.cipher_suite[0] ? ts.cipher_suite : "-", port_.min_free_heap(), heap_before_, phases);
}

bool BoardSession::on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes,
                           int64_t puback_us) {
  if (!handshake_printed_) print_handshake();
  char puback[32] = "";  // only at QoS 1 with its PUBACK read: an optional field old hosts ignore
  if (puback_us >= 0) snprintf(puback, sizeof(puback), " puback_us=%" PRId64, puback_us);
  line("%s seq=%" PRIu32 " t_send_us=%" PRId64 " bytes=%u mqtt=%u heap=%" PRIu32 " rssi=%d%s", proto::kLineMsg, seq,
       t_send_us, static_cast<unsigned>(payload_bytes), static_cast<unsigned>(mqtt_bytes), port_.free_heap(),
       port_.rssi(), puback);
  check_host_stop();
  return true;
}

void BoardSession::on_connection(const ConnectionStats& c) {
  if (mode_ == ConnectionMode::Persistent) return;  // its HANDSHAKE line says it all
  char tcp[24], tls[24], connack[24];
  fmt_ms(c.tcp_connect_us, tcp, sizeof(tcp));
  fmt_ms(c.handshake_us, tls, sizeof(tls));
  fmt_ms(c.connack_us, connack, sizeof(connack));
  const char* resumed = c.resumed == 1 ? "1" : c.resumed == 0 ? "0" : "-";
  char phases[224] = "";  // TLS only, as HANDSHAKE's
  if (board_transport_.stats().tls_version[0] != '\0') fmt_phases(c.phases, phases, sizeof(phases));
  line("%s i=%" PRIu32 " tcp_ms=%s tls_ms=%s connack_ms=%s resumed=%s msgs=%" PRIu32 " close=%s%s", proto::kLineConn,
       c.index, tcp, tls, connack, resumed, c.messages, close_mode_name(c.close), phases);
}

// Between messages: a STOP line from the host stops the run before the next one (the publisher's
// Err::Interrupted, then ERROR and READY). Anything else that arrives mid-run is dropped.
void BoardSession::check_host_stop() {
  uint8_t buf[kReadChunk];
  size_t got = 0;
  if (io_.read(buf, sizeof(buf), &got, 0) != Err::Ok) return;
  for (size_t i = 0; i < got; ++i) {
    char c = static_cast<char>(buf[i]);
    if (c == '\n') {
      if (stop_len_ > 0 && stop_buf_[stop_len_ - 1] == '\r') --stop_len_;
      stop_buf_[stop_len_] = '\0';
      if (strcmp(stop_buf_, proto::kCmdStop) == 0) host_stop_ = 1;
      stop_len_ = 0;
    } else if (stop_len_ + 1 < sizeof(stop_buf_)) {
      stop_buf_[stop_len_++] = c;
    } else {
      stop_len_ = sizeof(stop_buf_) - 1;  // a long line is no STOP: keep it from matching
      stop_buf_[0] = '#';
    }
  }
}

void BoardSession::write_line(const char* keylog_line) { line("%s %s", proto::kLineKeylog, keylog_line); }

}  // namespace tb
