// QoS 1 and 2 with an in-flight window, MQTT 5 (CONNACK properties, topic alias, reason codes) and a
// persistent session's recovery (publisher.h): a message stays in the in-flight store from its PUBLISH to
// its PUBACK (QoS 1) or PUBCOMP (QoS 2, after PUBREC -> PUBREL); at most `window_` are in flight. When a
// persistent session's connection is lost, it is opened again and, when the broker kept the session
// (CONNACK session present), every stored PUBLISH is sent again with DUP (and every PUBREL again), in
// the order first sent (3.1.1 4.4 and 4.6, MQTT 5 4.4).
#include <cinttypes>
#include <cstdio>

#include "publisher.h"

namespace tb {

namespace {
constexpr uint32_t kMaxFutileRecoveries = 5;
}  // namespace

// The link, not the broker's answer, ended the connection or refused to open one.
bool lost_link(Err e) {
  switch (e) {
    case Err::RecvTimeout: case Err::PeerClosed: case Err::Send: case Err::Recv: case Err::Socket:
    case Err::NotConnected: case Err::TlsWrite: case Err::TlsRead: case Err::ConnectRefused:
    case Err::ConnectTimeout: case Err::Connect: case Err::TlsHandshake: case Err::TlsAlert:
      return true;
    default:
      return false;
  }
}

Err Publisher::read_connack(const PublishConfig& cfg, size_t rlen) {
  mqtt::ConnackView ack;
  if (mqtt::decode_connack(rx_, rlen, cfg.mqtt_level, &ack) != Err::Ok) {
    if ((rx_[0] >> 4) == mqtt::kDisconnect && cfg.mqtt_level == mqtt::kLevel5) return broker_disconnect(rlen);
    err_.set("expected CONNACK, got a malformed or different packet (type %u)", rx_[0] >> 4);
    return Err::Protocol;
  }
  if (ack.code != 0) {
    if (cfg.mqtt_level == mqtt::kLevel5) {
      err_.set("the broker refused the MQTT 5 connection: CONNACK reason 0x%02x (%s)%s%.*s", ack.code,
               mqtt::reason_name(ack.code), ack.reason_string_len ? ": " : "", ack.reason_string_len,
               ack.reason_string ? ack.reason_string : "");
    } else {
      err_.set("the broker refused the MQTT connection: CONNACK %u (%s)", ack.code, mqtt::connack_reason(ack.code));
    }
    return Err::ConnackRefused;
  }
  if (cfg.mqtt_level == mqtt::kLevel5 && cfg.qos > ack.maximum_qos) {
    err_.set("the broker takes QoS %u at most (CONNACK Maximum QoS), the run asks for %u", ack.maximum_qos, cfg.qos);
    return Err::Protocol;
  }
  if (cfg.topic_alias && ack.topic_alias_maximum == 0) {
    err_.set("the broker allows no topic alias (CONNACK Topic Alias Maximum 0; Mosquitto: max_topic_alias)");
    return Err::Protocol;
  }
  session_present_ = ack.session_present;
  alias_max_ = ack.topic_alias_maximum;
  alias_set_ = false;  // aliases belong to one network connection (MQTT 5 3.3.2.3.4)
  window_ = cfg.inflight < ack.receive_maximum ? cfg.inflight : ack.receive_maximum;
  return Err::Ok;
}

Err Publisher::broker_disconnect(size_t len) {
  uint8_t reason = 0;
  const char* text = nullptr;
  uint16_t text_len = 0;
  if (mqtt::decode_disconnect5(rx_, len, &reason, &text, &text_len) != Err::Ok) {
    err_.set("malformed DISCONNECT from the broker");
    return Err::Malformed;
  }
  err_.set("the broker disconnected: reason 0x%02x (%s)%s%.*s", reason, mqtt::reason_name(reason),
           text_len ? ": " : "", text_len, text ? text : "");
  return Err::PeerClosed;
}

// PUBLISH of message m (its payload made again from m): the topic, or alias 1 once it carries the topic.
Err Publisher::send_publish(const PublishConfig& cfg, const InFlight& m, uint8_t qos, bool dup, size_t* len) {
  Err e = payload_encode(cfg.device_id, m.seq, m.t_send_us, m.reading, cfg.payload_size, payload_, sizeof(payload_),
                         &err_);
  if (e != Err::Ok) return e;
  mqtt::PublishOptions po;
  po.level = cfg.mqtt_level;
  po.qos = qos;
  po.packet_id = qos ? m.id : 0;
  po.dup = dup;
  po.topic_alias = cfg.topic_alias ? 1 : 0;
  e = mqtt::encode_publish(alias_set_ && cfg.topic_alias ? "" : cfg.topic, reinterpret_cast<const uint8_t*>(payload_),
                           cfg.payload_size, po, packet_, sizeof(packet_), len);
  if (e != Err::Ok) {
    err_.set("PUBLISH cannot be encoded (%s)", err_name(e));
    return e;
  }
  e = transport_.write_all(packet_, *len);
  if (e != Err::Ok) return transport_error(e, "sending PUBLISH failed");
  if (cfg.topic_alias) alias_set_ = true;
  return Err::Ok;
}

// A free slot for message seq with the next packet id not in use (ids continue across connections).
InFlight* Publisher::new_inflight(uint32_t seq) {
  InFlight* slot = nullptr;
  for (InFlight& m : inflight_) {
    if (m.state == 0) {
      slot = &m;
      break;
    }
  }
  bool in_use = true;
  while (in_use) {
    packet_id_ = static_cast<uint16_t>(packet_id_ == 0xFFFF ? 1 : packet_id_ + 1);
    in_use = false;
    for (const InFlight& m : inflight_) in_use = in_use || (m.state != 0 && m.id == packet_id_);
  }
  *slot = InFlight();
  slot->seq = seq;
  slot->id = packet_id_;
  slot->state = 1;
  ++inflight_count_;
  return slot;
}

const InFlight* Publisher::oldest() const {
  const InFlight* first = nullptr;
  for (const InFlight& m : inflight_) {
    if (m.state != 0 && (first == nullptr || m.handed_us < first->handed_us)) first = &m;
  }
  return first;
}

int64_t Publisher::ack_deadline(const PublishConfig& cfg) const {
  int64_t first = INT64_MAX;
  for (const InFlight& m : inflight_) {
    if (m.state != 0 && m.sent_us < first) first = m.sent_us;
  }
  return first + static_cast<int64_t>(cfg.ack_timeout_ms) * 1000;
}

void Publisher::complete(InFlight* m, int64_t ack_us) {
  InFlight done = *m;
  if (ack_us >= 0) futile_recoveries_ = 0;
  m->state = 0;
  --inflight_count_;
  if (!observer_.on_sent(done.seq, done.t_send_us, payload_size_, done.mqtt_bytes, ack_us)) {
    send_log_failed_ = true;
  }
}

// One packet from the broker: an acknowledgement of a message in flight, PINGRESP, or (MQTT 5) DISCONNECT.
Err Publisher::handle_packet(const PublishConfig& cfg, size_t len, bool* pingresp) {
  const uint8_t type = rx_[0] >> 4;
  if (type == mqtt::kPingresp && mqtt::decode_pingresp(rx_, len) == Err::Ok) {
    *pingresp = true;
    return Err::Ok;
  }
  if (type == mqtt::kDisconnect && cfg.mqtt_level == mqtt::kLevel5) return broker_disconnect(len);
  mqtt::AckView ack;
  if (mqtt::decode_ack(rx_, len, cfg.mqtt_level, &ack) != Err::Ok || ack.type == mqtt::kPubrel) {
    err_.set("expected an acknowledgement (PUBACK/PUBREC/PUBCOMP), got packet type %u", type);
    return Err::Protocol;
  }
  const uint8_t want_state = ack.type == mqtt::kPubcomp ? 2 : 1;
  const bool qos_fits = (ack.type == mqtt::kPuback) == (cfg.qos == 1);
  InFlight* m = nullptr;
  for (InFlight& f : inflight_) {
    if (f.state == want_state && f.id == ack.packet_id) m = &f;
  }
  if (m == nullptr || (!qos_fits && ack.type != mqtt::kPubcomp)) {
    err_.set("%s for packet id %u, which is not awaiting it (expected %u)", ack.type == mqtt::kPuback ? "PUBACK"
             : ack.type == mqtt::kPubrec ? "PUBREC" : "PUBCOMP", ack.packet_id, oldest() ? oldest()->id : 0);
    return Err::AckMismatch;
  }
  if (ack.reason >= 0x80) {  // MQTT 5: the broker refused the message; the exchange ends (4.3.3)
    err_.set("the broker refused message %" PRIu32 ": %s reason 0x%02x (%s)", m->seq,
             ack.type == mqtt::kPuback ? "PUBACK" : "PUBREC", ack.reason, mqtt::reason_name(ack.reason));
    complete(m, -1);
    return Err::Protocol;
  }
  if (ack.type == mqtt::kPubrec) {  // QoS 2: release it
    size_t out = 0;
    Err e = mqtt::encode_ack(mqtt::kPubrel, ack.packet_id, cfg.mqtt_level, 0, packet_, sizeof(packet_), &out);
    if (e == Err::Ok) e = transport_.write_all(packet_, out);
    if (e != Err::Ok) return transport_error(e, "sending PUBREL failed");
    m->state = 2;
    return Err::Ok;
  }
  complete(m, clock_.mono_us() - m->handed_us);
  return send_log_failed_ ? Err::SendLog : Err::Ok;
}

Err Publisher::await_packet(const PublishConfig& cfg, uint32_t timeout_ms) {
  size_t len = 0;
  Err e = read_packet(timeout_ms, &len);
  wait_timed_out_ = e == Err::RecvTimeout;
  if (e == Err::RecvTimeout) return e;
  if (e != Err::Ok) {
    return (e == Err::Malformed || e == Err::Protocol) ? e : transport_error(e, "waiting for an acknowledgement");
  }
  bool pingresp = false;
  return handle_packet(cfg, len, &pingresp);
}

// RecvTimeout when the oldest message in flight has waited ack_timeout_ms for its acknowledgement.
Err Publisher::overdue(const PublishConfig& cfg, int64_t now) {
  const InFlight* m = nullptr;
  for (const InFlight& f : inflight_) {
    if (f.state != 0 && (m == nullptr || f.sent_us < m->sent_us)) m = &f;
  }
  if (m == nullptr || now < ack_deadline(cfg)) return Err::Ok;
  // the transport's own account of the wait that timed out (e.g. a link that is down), when it gave one
  const char* cause = wait_timed_out_ ? transport_.error_text() : "";
  err_.set("waiting for %s of message %" PRIu32 " (packet id %u): no answer from the broker within %u ms%s%s",
           cfg.qos == 1 ? "PUBACK" : m->state == 1 ? "PUBREC" : "PUBCOMP", m->seq, m->id,
           static_cast<unsigned>(cfg.ack_timeout_ms), *cause != '\0' ? ": " : "", cause);
  return Err::RecvTimeout;
}

// Reads acknowledgements until at most `keep` messages are in flight.
Err Publisher::drain(const PublishConfig& cfg, uint16_t keep) {
  while (inflight_count_ > keep) {
    const int64_t now = clock_.mono_us();
    Err e = overdue(cfg, now);
    if (e != Err::Ok) return e;
    const int64_t left = ack_deadline(cfg) - now;
    e = await_packet(cfg, static_cast<uint32_t>((left + 999) / 1000));
    if (e != Err::Ok && e != Err::RecvTimeout) return e;
  }
  return Err::Ok;
}

// The run failed: every message still in flight is reported without an acknowledgement time.
void Publisher::give_up_inflight() {
  for (InFlight& m : inflight_) {
    if (m.state == 0) continue;
    if (run_stats_ != nullptr) ++run_stats_->lost;
    complete(&m, -1);
  }
}

Err Publisher::resend_inflight(const PublishConfig& cfg) {
  for (uint16_t left = inflight_count_; left > 0; --left) {  // oldest first
    InFlight* m = nullptr;
    for (InFlight& f : inflight_) {
      if (f.state != 0 && f.resent_at_reconnect != run_stats_->reconnects &&
          (m == nullptr || f.handed_us < m->handed_us)) {
        m = &f;
      }
    }
    if (m == nullptr) break;
    m->resent_at_reconnect = run_stats_->reconnects;
    m->sent_us = clock_.mono_us();
    size_t len = 0;
    Err e;
    if (m->state == 1) {
      e = send_publish(cfg, *m, cfg.qos, true, &len);
    } else {
      e = mqtt::encode_ack(mqtt::kPubrel, m->id, cfg.mqtt_level, 0, packet_, sizeof(packet_), &len);
      if (e == Err::Ok) e = transport_.write_all(packet_, len);
      if (e != Err::Ok) transport_error(e, "sending PUBREL again failed");
    }
    if (e != Err::Ok) return e;
    ++run_stats_->resent;
  }
  return Err::Ok;
}

bool Publisher::recoverable(const PublishConfig& cfg, Err e) const {
  if (stop_requested()) return false;
  if (cfg.reconnect != ReconnectPolicy::Off) return lost_link(e);
  if (cfg.clean_session) return false;
  switch (e) {
    case Err::RecvTimeout: case Err::PeerClosed: case Err::Send: case Err::Recv: case Err::Socket:
    case Err::NotConnected: case Err::TlsWrite: case Err::TlsRead:
      return true;
    default:
      return false;
  }
}

void Publisher::report(const ConnectionStats& cs, RunStats* stats) {
  ++stats->connections;
  if (cs.resumed == 1) ++stats->resumed_connections;
  observer_.on_connection(cs);
}

// Opens the connection, and while it fails for the link's sake (refused, reset, timed out) opens it again
// after the policy's pause, for up to reconnect_for_ms. cs: the attempt that succeeded, or the last one.
Err Publisher::reopen(const PublishConfig& cfg, ConnectionStats* cs, Err failed) {
  const int64_t deadline = clock_.mono_us() + static_cast<int64_t>(cfg.reconnect_for_ms) * 1000;
  Err e = failed;
  for (uint32_t attempt = 0;; ++attempt) {
    transport_.abort();
    if (cfg.reconnect != ReconnectPolicy::Off && cs->connect_sent && run_stats_ != nullptr) {
      cs->error = e;  // an attempt the wire names by its CONNECT is reported
      report(*cs, run_stats_);
      const CloseMode close = cs->close;
      *cs = ConnectionStats();
      cs->index = next_connection_++;
      cs->close = close;
    }
    if (stop_requested()) return Err::Interrupted;
    clock_.sleep_until_mono_us(clock_.mono_us() + static_cast<int64_t>(reconnect_pause_us(
        cfg.reconnect, cfg.reconnect_base_ms, cfg.reconnect_cap_ms, attempt, &reconnect_rng_)));
    cs->t_open_us = clock_.wall_us();
    e = connect(cfg, cs);
    if (e == Err::Ok || e == Err::ConnackRefused || e == Err::Malformed || e == Err::Protocol) return e;
    if (stop_requested() || clock_.mono_us() >= deadline) return e;
  }
}

// A connection was lost (error `lost`): it is dropped (nothing more can be sent on it) and opened again by
// the reconnect policy (Off: a persistent session's, every 200 ms); then the kept messages go again. With a
// policy, the lost connection is reported (its messages from *cs_first) and cs becomes the new one.
Err Publisher::recover(const PublishConfig& cfg, Err lost, int64_t* last_tx, RunStats* stats, ConnectionStats* cs,
                       uint32_t* cs_first) {
  ErrorText first;
  first.set("%s", err_.c_str());
  if (++futile_recoveries_ > kMaxFutileRecoveries) {
    err_.set("%s; the persistent session was opened again %u times without an acknowledgement in between",
             first.c_str(), kMaxFutileRecoveries);
    return Err::RecvTimeout;
  }
  if (cfg.reconnect != ReconnectPolicy::Off) {
    transport_.abort();
    cs->error = lost;
    cs->messages = stats->messages_sent - *cs_first;
    report(*cs, stats);
    const CloseMode close = cs->close;
    *cs = ConnectionStats();
    cs->index = next_connection_++;
    cs->close = close;
    *cs_first = stats->messages_sent;
  }
  Err e = reopen(cfg, cs, lost);
  if (e == Err::Interrupted) return e;
  if (e != Err::Ok) {
    err_.set("%s; opening the connection again failed for %u ms: %s", first.c_str(),
             static_cast<unsigned>(cfg.reconnect_for_ms), err_.c_str());
    return e;
  }
  ++stats->reconnects;
  *last_tx = clock_.mono_us();
  if (!session_present_) {  // the broker lost the session: its state is discarded (3.2.2.2)
    give_up_inflight();
    return send_log_failed_ ? Err::SendLog : Err::Ok;
  }
  return resend_inflight(cfg);
}

}  // namespace tb
