// The publish loop over the run's connections (publisher.h): one connection (Persistent) or one per
// K messages; each ended by DISCONNECT + the broker's close + close_notify, or dropped.
#include <cinttypes>
#include <cstdio>

#include "publisher.h"

namespace tb {

Err Publisher::interrupted(const PublishConfig& cfg, uint32_t seq) {
  err_.set("stopped by a signal after %" PRIu32 " of %" PRIu32 " messages", seq, cfg.samples);
  return Err::Interrupted;
}

Err Publisher::run(const PublishConfig& cfg, RunStats* stats) {
  *stats = RunStats();
  Err e = validate(cfg);
  if (e != Err::Ok) return e;
  transport_.set_resumption(resumption_for(cfg.mode));
  const bool persistent = cfg.mode == ConnectionMode::Persistent;
  const uint32_t per = persistent ? cfg.samples : cfg.per_connection;
  int64_t t0 = persistent ? -1 : clock_.mono_us();  // Persistent: set after the CONNACK
  packet_id_ = 0;
  uint32_t seq = 0;
  for (uint32_t i = 0; e == Err::Ok && seq < cfg.samples; ++i) {
    if (!persistent) {  // no connection open: sleep until the first message of the next one is due
      e = wait_until(cfg, t0 + static_cast<int64_t>(seq * cfg.interval_us), nullptr);
      if (e == Err::Interrupted) interrupted(cfg, seq);
      if (e != Err::Ok) break;
    }
    ConnectionStats cs;
    cs.index = i;
    cs.close = cfg.close;
    const uint32_t count = cfg.samples - seq < per ? cfg.samples - seq : per;
    e = connection(cfg, &t0, seq, count, &cs, stats);
    cs.error = e;
    ++stats->connections;
    if (cs.resumed == 1) ++stats->resumed_connections;
    observer_.on_connection(cs);
    seq += cs.messages;
  }
  return e;
}

// One connection: open, CONNECT/CONNACK, messages first .. first+count-1 on the schedule, the end.
Err Publisher::connection(const PublishConfig& cfg, int64_t* t0, uint32_t first, uint32_t count,
                          ConnectionStats* cs, RunStats* stats) {
  cs->t_open_us = clock_.wall_us();
  Err e = connect(cfg, cs);
  if (cs->index == 0) {  // the run's figures (HANDSHAKE line, summary) are the first connection's
    stats->tcp_connect_us = cs->tcp_connect_us;
    stats->handshake_us = cs->handshake_us;
    stats->connack_us = cs->connack_us;
  }
  if (e != Err::Ok) return end_connection(cfg, e);
  int64_t last_tx = clock_.mono_us();
  if (*t0 < 0) *t0 = last_tx;
  for (uint32_t k = 0; k < count; ++k) {
    const uint32_t seq = first + k;
    e = wait_until(cfg, *t0 + static_cast<int64_t>(seq * cfg.interval_us), &last_tx);
    if (e == Err::Interrupted) interrupted(cfg, seq);
    if (e != Err::Ok) break;
    e = publish_one(cfg, seq, &last_tx, stats);
    if (e != Err::Ok) break;
  }
  cs->messages = stats->messages_sent - first;
  return end_connection(cfg, e);
}

// One reading: sensors, payload, PUBLISH, at QoS 1 its PUBACK, the observer.
Err Publisher::publish_one(const PublishConfig& cfg, uint32_t seq, int64_t* last_tx, RunStats* stats) {
  SensorReading reading;
  Err e = sensors_.read(seq, &reading);
  if (e != Err::Ok) {
    err_.set("sensor read failed at message %" PRIu32, seq);
    return e;
  }
  int64_t t_send = clock_.wall_us();
  e = payload_encode(cfg.device_id, seq, t_send, reading, cfg.payload_size, payload_, sizeof(payload_), &err_);
  if (e != Err::Ok) return e;
  if (cfg.qos == 1) packet_id_ = static_cast<uint16_t>(packet_id_ == 0xFFFF ? 1 : packet_id_ + 1);
  size_t len = 0;
  e = mqtt::encode_publish(cfg.topic, reinterpret_cast<const uint8_t*>(payload_), cfg.payload_size, cfg.qos,
                           cfg.qos == 1 ? packet_id_ : 0, false, false, packet_, sizeof(packet_), &len);
  if (e != Err::Ok) {
    err_.set("PUBLISH cannot be encoded (%s)", err_name(e));
    return e;
  }
  const int64_t handed_us = clock_.mono_us();
  e = transport_.write_all(packet_, len);
  if (e != Err::Ok) return transport_error(e, "sending PUBLISH failed");
  *last_tx = clock_.mono_us();
  stats->messages_sent = seq + 1;
  int64_t puback_us = -1;
  if (cfg.qos == 1) {
    e = wait_puback(cfg, packet_id_);
    if (e == Err::Ok) puback_us = clock_.mono_us() - handed_us;
  }
  if (!observer_.on_sent(seq, t_send, cfg.payload_size, len, puback_us) && e == Err::Ok) {
    err_.set("recording message %" PRIu32 " in the send log failed", seq);
    e = Err::SendLog;
  }
  return e;
}

// Disconnect: after a good connection DISCONNECT and the broker's close, then close() (close_notify);
// after a failure close() alone. Drop: abort() either way - nothing more goes to the broker.
Err Publisher::end_connection(const PublishConfig& cfg, Err e) {
  if (cfg.close == CloseMode::Drop) {
    transport_.abort();
    return e;
  }
  if (e == Err::Ok) {
    size_t len = 0;
    e = mqtt::encode_disconnect(packet_, sizeof(packet_), &len);
    if (e == Err::Ok) {
      e = transport_.write_all(packet_, len);
      if (e != Err::Ok) transport_error(e, "sending DISCONNECT failed");
    }
    if (e == Err::Ok) e = wait_broker_close(cfg.drain_timeout_ms);
  }
  transport_.close();
  return e;
}

}  // namespace tb
