// The publish loop over the run's connections (publisher.h): one connection (Persistent) or one per
// K messages; each ended by DISCONNECT + the broker's close + close_notify, or dropped.
#include <cinttypes>
#include <cstdio>

#include "publisher.h"

namespace tb {
namespace {

int64_t due_us(const PublishConfig& cfg, uint32_t seq) {
  return scheduled_offset_us(cfg.mode, cfg.per_connection, cfg.interval_us, cfg.sleep_us, seq);
}

}  // namespace

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
  for (InFlight& m : inflight_) m = InFlight();
  inflight_count_ = 0;
  run_stats_ = stats;
  payload_size_ = cfg.payload_size;
  send_log_failed_ = false;
  futile_recoveries_ = 0;
  next_connection_ = 0;
  reconnect_rng_ = cfg.reconnect_seed;
  uint32_t seq = 0;
  while (e == Err::Ok && seq < cfg.samples) {
    if (!persistent) {  // no connection open: sleep until the first message of the next one is due
      if (between_ != nullptr && next_connection_ > 0) {
        e = between_->sleep(cfg.sleep_mode, t0 + due_us(cfg, seq));
        if (e != Err::Ok) {
          transport_error(e, "the sleep between connections failed");
          break;
        }
      }
      e = wait_until(cfg, t0 + due_us(cfg, seq), nullptr);
      if (e == Err::Interrupted) interrupted(cfg, seq);
      if (e != Err::Ok) break;
    }
    ConnectionStats cs;
    cs.index = next_connection_++;
    cs.close = cfg.close;
    // the rest of this connection's K (a connection opened again after a loss carries what was left)
    const uint32_t left = per - seq % per;
    const uint32_t count = cfg.samples - seq < left ? cfg.samples - seq : left;
    uint32_t first = seq;
    e = connection(cfg, &t0, &first, count, &cs, stats);
    cs.error = e;
    report(cs, stats);
    // a policy's device goes on after a connection that carried messages and was then lost (e.g. at its
    // DISCONNECT, the broker gone): the next one opens on schedule
    if (e != Err::Ok && cfg.reconnect != ReconnectPolicy::Off && stats->messages_sent > seq &&
        recoverable(cfg, e)) {
      e = Err::Ok;
    }
    seq = stats->messages_sent;
  }
  return e;
}

// One connection: open, CONNECT/CONNACK, messages first .. first+count-1 on the schedule, the end.
Err Publisher::connection(const PublishConfig& cfg, int64_t* t0, uint32_t* first, uint32_t count,
                          ConnectionStats* cs, RunStats* stats) {
  if (marker_ != nullptr) marker_->mark();
  cs->t_open_us = clock_.wall_us();
  Err e = connect(cfg, cs);
  if (e != Err::Ok && cfg.reconnect != ReconnectPolicy::Off && recoverable(cfg, e)) e = reopen(cfg, cs, e);
  if (cs->index == 0) {  // the run's figures (HANDSHAKE line, summary) are the first connection's
    stats->tcp_connect_us = cs->tcp_connect_us;
    stats->handshake_us = cs->handshake_us;
    stats->connack_us = cs->connack_us;
  }
  if (e != Err::Ok) return end_connection(cfg, e);
  int64_t last_tx = clock_.mono_us();
  if (*t0 < 0) *t0 = last_tx;
  const uint32_t end = *first + count;
  uint32_t seq = *first;
  while (e == Err::Ok && seq < end) {
    e = wait_until(cfg, *t0 + due_us(cfg, seq), &last_tx);
    if (e == Err::Interrupted) interrupted(cfg, seq);
    if (e == Err::Ok) e = publish_one(cfg, seq, &last_tx, stats);
    if (e != Err::Ok && recoverable(cfg, e)) e = recover(cfg, e, &last_tx, stats, cs, first);
    if (stats->messages_sent > seq) ++seq;  // else the same message again, after the recovery
  }
  while (e == Err::Ok && inflight_count_ > 0) {  // the last acknowledgements before the end
    e = drain(cfg, 0);
    if (e != Err::Ok && recoverable(cfg, e)) e = recover(cfg, e, &last_tx, stats, cs, first);
  }
  cs->messages = stats->messages_sent - *first;
  return end_connection(cfg, e);
}

// One reading: sensors, payload, PUBLISH; at QoS 1/2 it joins the in-flight store, and the window is
// waited down below its limit (a window of 1: its own acknowledgement, before the next message).
Err Publisher::publish_one(const PublishConfig& cfg, uint32_t seq, int64_t* last_tx, RunStats* stats) {
  InFlight one;
  InFlight* m = cfg.qos > 0 ? new_inflight(seq) : &one;
  m->seq = seq;
  Err e = sensors_.read(seq, &m->reading);
  if (e != Err::Ok) {
    err_.set("sensor read failed at message %" PRIu32, seq);
    return e;
  }
  if (marker_ != nullptr) marker_->mark();
  m->t_send_us = clock_.wall_us();
  m->handed_us = clock_.mono_us();
  m->sent_us = m->handed_us;
  size_t len = 0;
  e = send_publish(cfg, *m, cfg.qos, false, &len);
  m->mqtt_bytes = len;
  if (e != Err::Ok && len == 0 && cfg.qos > 0) {  // not encoded: nothing went out
    m->state = 0;
    --inflight_count_;
  }
  if (e != Err::Ok && (len == 0 || cfg.qos == 0)) return e;
  *last_tx = clock_.mono_us();
  stats->messages_sent = seq + 1;  // handed to the transport (a failed write included: it is kept)
  if (e != Err::Ok) return e;
  if (cfg.qos == 0) {
    if (cfg.reconnect != ReconnectPolicy::Off) futile_recoveries_ = 0;  // handed over on the new connection
    if (!observer_.on_sent(seq, m->t_send_us, cfg.payload_size, len, -1)) send_log_failed_ = true;
  } else {
    e = drain(cfg, static_cast<uint16_t>(window_ - 1));
  }
  if (send_log_failed_ && e == Err::Ok) {
    err_.set("recording message %" PRIu32 " in the send log failed", seq);
    e = Err::SendLog;
  }
  return e;
}

// Disconnect: after a good connection DISCONNECT and the broker's close, then close() (close_notify);
// after a failure close() alone. Drop: abort() either way - nothing more goes to the broker.
Err Publisher::end_connection(const PublishConfig& cfg, Err e) {
  if (e != Err::Ok) give_up_inflight();
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

Err emulate_sleep(Transport& t, SleepMode mode, KeptSession* rtc, int* kept) {
  *kept = 0;
  if (mode != SleepMode::Deep) return Err::Ok;
  Err e = t.keep_session(rtc);
  if (e != Err::Ok) return e;
  t.power_off();  // the wake: nothing of the transport is left but what RTC memory kept
  *kept = rtc->valid() ? 1 : 0;
  return t.restore_session(*rtc);
}

}  // namespace tb
