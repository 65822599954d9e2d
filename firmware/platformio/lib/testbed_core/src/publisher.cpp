#include "publisher.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace tb {

PublishConfig::PublishConfig(const DeviceConfig& c)
    : host(c.host),
      port(static_cast<uint16_t>(c.given(opt::Id::port) ? c.port : strcmp(c.transport, "tls") == 0 ? 8883 : 1883)),
      device_id(c.device_id),
      topic(c.topic),
      client_id(c.given(opt::Id::client_id) ? c.client_id : c.device_id),
      username(c.given_text(opt::Id::username)),
      password(c.given_text(opt::Id::password)),
      keepalive_s(kKeepaliveS),
      qos(static_cast<uint8_t>(c.qos)),
      payload_size(static_cast<size_t>(c.payload)),
      samples(static_cast<uint32_t>(c.samples)),
      // the board's RUN carries microseconds, the host programs' command line milliseconds (decimals allowed)
      interval_us(c.program == TB_BOARD ? c.interval_us : static_cast<uint64_t>(std::llround(c.interval_ms * 1000.0))),
      connect_timeout_ms(static_cast<uint32_t>(c.connect_timeout_ms)),
      ack_timeout_ms(static_cast<uint32_t>(c.ack_timeout_ms)),
      drain_timeout_ms(kDrainTimeoutMs),
      mode(ConnectionMode::Persistent),
      per_connection(static_cast<uint32_t>(c.per_connection)),
      sleep_us(static_cast<uint64_t>(std::llround(c.sleep_ms * 1000.0))),
      close(CloseMode::Disconnect),
      power_save(PowerSave::None),
      sleep_mode(SleepMode::Stay),
      mqtt_level(strcmp(c.mqtt, "5") == 0 ? mqtt::kLevel5 : mqtt::kLevel311),
      clean_session(strcmp(c.session, "persistent") != 0),
      session_expiry_s(static_cast<uint32_t>(c.session_expiry_s)),
      topic_alias(strcmp(c.topic_alias, "on") == 0),
      inflight(static_cast<uint16_t>(c.inflight)),
      reconnect_for_ms(kReconnectForMs),
      reconnect(ReconnectPolicy::Off),
      reconnect_base_ms(static_cast<uint32_t>(std::llround(c.reconnect_base_ms))),
      reconnect_cap_ms(static_cast<uint32_t>(std::llround(c.reconnect_cap_ms))),
      reconnect_seed(c.seed) {
  // the board's name for the connection lifecycle is `mode`, the host programs' `connection`; the words
  // have passed opt::valid, so the parses cannot fail
  parse_connection_mode(c.program == TB_BOARD ? c.mode : c.connection, &mode);
  parse_close_mode(c.close, &close);
  parse_reconnect_policy(c.reconnect, &reconnect);
  parse_power_save(c.power_save, &power_save);
  parse_sleep_mode(c.sleep_mode, &sleep_mode);
}

Err Publisher::transport_error(Err e, const char* what) {
  char detail[ErrorText::kCapacity];
  snprintf(detail, sizeof(detail), "%s", transport_.error_text());
  err_.set("%s: %s", what, detail);
  return e;
}

// QoS, MQTT version, topic alias and the in-flight window of a run.
bool Publisher::protocol_ok(const PublishConfig& cfg) {
  if (cfg.qos > 2) {
    err_.set("qos must be 0, 1 or 2");
  } else if (cfg.mqtt_level != mqtt::kLevel311 && cfg.mqtt_level != mqtt::kLevel5) {
    err_.set("the MQTT protocol level must be 4 (3.1.1) or 5");
  } else if (cfg.topic_alias && cfg.mqtt_level != mqtt::kLevel5) {
    err_.set("a topic alias needs MQTT 5");
  } else if (cfg.inflight == 0 || cfg.inflight > kMaxInflight) {
    err_.set("in-flight messages must be 1..%u (the core's fixed in-flight store)", kMaxInflight);
  } else {
    return true;
  }
  return false;
}

Err Publisher::validate(const PublishConfig& cfg) {
  err_.clear();
  checked_connect_len_ = 0;
  if (cfg.host == nullptr || cfg.host[0] == '\0') {
    err_.set("broker host is empty");
    return Err::InvalidArgument;
  }
  if (cfg.port == 0) {
    err_.set("broker port must be 1..65535");
    return Err::InvalidArgument;
  }
  if (!protocol_ok(cfg)) return Err::InvalidArgument;
  if (cfg.mode != ConnectionMode::Persistent && cfg.per_connection == 0) {
    err_.set("messages per connection must be at least 1");
    return Err::InvalidArgument;
  }
  Err e = payload_check_size(cfg.device_id, cfg.samples, cfg.payload_size, &err_);
  if (e != Err::Ok) return e;
  // Try one packet with worst-case values so topic/client id problems surface before connecting.
  SensorReading worst;
  worst.flame_digital = 1;
  worst.flame_analog = kMaxAnalog;
  worst.mq2_analog = kMaxAnalog;
  worst.mq2_ppm = kMaxPpm;
  e = payload_encode(cfg.device_id, cfg.samples - 1, kMaxTimestampUs, worst, cfg.payload_size, payload_,
                     sizeof(payload_), &err_);
  if (e != Err::Ok) return e;
  size_t len = 0;
  mqtt::PublishOptions po;
  po.level = cfg.mqtt_level;
  po.qos = cfg.qos;
  po.packet_id = cfg.qos ? 1 : 0;
  po.topic_alias = cfg.topic_alias ? 1 : 0;
  e = mqtt::encode_publish(cfg.topic, reinterpret_cast<const uint8_t*>(payload_), cfg.payload_size, po, packet_,
                           sizeof(packet_), &len);
  if (e == Err::Ok && cfg.topic[0] == '\0') e = Err::InvalidArgument;  // the first PUBLISH carries the topic
  if (e != Err::Ok) {
    err_.set("topic \"%s\" is not a valid MQTT topic name for publishing (1..65535 bytes UTF-8, no + or #)",
             cfg.topic);
    return e;
  }
  e = encode_connect_packet(cfg, &len);
  if (e != Err::Ok) {
    err_.set("CONNECT cannot be encoded: client id must be valid UTF-8 and a password needs a username");
    return e;
  }
  checked_connect_len_ = len;
  rest_timeout_ms_ = cfg.ack_timeout_ms;
  return Err::Ok;
}

// The one place a run's CONNECT is made: the check pass (validate) and every connection encode it here.
mqtt::ConnectOptions connect_options(const PublishConfig& cfg) {
  mqtt::ConnectOptions co;
  co.client_id = cfg.client_id;
  co.username = cfg.username;
  co.password = cfg.password;
  co.keepalive_s = cfg.keepalive_s;
  // true: no session state is kept between connections (3.1.1 3.1.2.4); false: the broker keeps the
  // session (its subscriptions and our unacknowledged QoS 1/2 messages) across them
  co.clean_session = cfg.clean_session;
  co.level = cfg.mqtt_level;
  co.session_expiry_s = cfg.mqtt_level == mqtt::kLevel5 && !cfg.clean_session ? cfg.session_expiry_s : 0;
  return co;
}

Err Publisher::encode_connect_packet(const PublishConfig& cfg, size_t* len) {
  return mqtt::encode_connect(connect_options(cfg), packet_, sizeof(packet_), len);
}

size_t Publisher::checked_connect(const uint8_t** bytes) const {
  *bytes = packet_;
  return checked_connect_len_;
}

// timeout_ms bounds the wait for the packet's first byte; the rest of it is given the ack timeout (a
// short wait between messages must not cut a packet in two).
Err Publisher::read_packet(uint32_t timeout_ms, size_t* len) {
  Err e = transport_.read_exact(rx_, 1, timeout_ms);
  if (e != Err::Ok) return e;
  if (timeout_ms < rest_timeout_ms_) timeout_ms = rest_timeout_ms_;
  size_t pos = 1;
  mqtt::FixedHeader h;
  while (true) {
    e = mqtt::decode_fixed_header(rx_, pos, &h);
    if (e == Err::Ok) break;
    if (e != Err::NeedMore || pos >= 5) {
      err_.set("malformed MQTT fixed header from the broker (first byte 0x%02x)", rx_[0]);
      return Err::Malformed;
    }
    e = transport_.read_exact(rx_ + pos, 1, timeout_ms);
    if (e != Err::Ok) return e;
    ++pos;
  }
  if (h.header_len + h.remaining > sizeof(rx_)) {
    err_.set("unexpected %u-byte MQTT packet (type %u) from the broker",
             static_cast<unsigned>(h.header_len + h.remaining), h.type);
    return Err::Protocol;
  }
  e = transport_.read_exact(rx_ + pos, h.remaining, timeout_ms);
  if (e != Err::Ok) return e;
  *len = h.header_len + h.remaining;
  return Err::Ok;
}

Err Publisher::connect(const PublishConfig& cfg, ConnectionStats* cs) {
  Err e = transport_.open(cfg.host, cfg.port, cfg.connect_timeout_ms);
  const TransportStats& ts = transport_.stats();
  cs->tcp_connect_us = ts.tcp_connect_us;
  cs->handshake_us = ts.handshake_us;
  cs->resumed = ts.resumed;
  cs->session_offered = ts.session_offered;
  if (e != Err::Ok) {
    err_.set("%s", transport_.error_text());
    return e;
  }
  size_t len = 0;
  e = encode_connect_packet(cfg, &len);
  if (e != Err::Ok) {
    err_.set("CONNECT cannot be encoded (%s)", err_name(e));
    return e;
  }
  int64_t start = clock_.mono_us();
  e = transport_.write_all(packet_, len);
  if (e != Err::Ok) return transport_error(e, "sending CONNECT failed");
  cs->connect_sent = true;
  cs->phases = transport_.stats().phases;  // busy_us ends at this first application write
  size_t rlen = 0;
  e = read_packet(cfg.ack_timeout_ms, &rlen);
  if (e != Err::Ok) {
    if (e == Err::Malformed || e == Err::Protocol) return e;
    return transport_error(e, "waiting for CONNACK failed");
  }
  e = read_connack(cfg, rlen);
  cs->connack_us = clock_.mono_us() - start;
  return e;
}

Err Publisher::ping(const PublishConfig& cfg) {
  size_t len = 0;
  Err e = mqtt::encode_pingreq(packet_, sizeof(packet_), &len);
  if (e != Err::Ok) return e;
  e = transport_.write_all(packet_, len);
  if (e != Err::Ok) return transport_error(e, "sending PINGREQ failed");
  bool pingresp = false;
  while (!pingresp) {  // acknowledgements of messages in flight may come first
    size_t rlen = 0;
    e = read_packet(cfg.ack_timeout_ms, &rlen);
    if (e != Err::Ok) return (e == Err::Malformed || e == Err::Protocol) ? e : transport_error(e, "waiting for PINGRESP");
    e = handle_packet(cfg, rlen, &pingresp);
    if (e != Err::Ok) return e;
  }
  return Err::Ok;
}

Err Publisher::wait_until(const PublishConfig& cfg, int64_t target_us, int64_t* last_tx_us) {
  // Keep the session alive when the interval is longer than half the keepalive.
  int64_t ping_every = static_cast<int64_t>(cfg.keepalive_s) * 500000;
  while (true) {
    if (stop_requested()) {
      return Err::Interrupted;  // the caller names the message count
    }
    int64_t now = clock_.mono_us();
    if (now >= target_us) return Err::Ok;
    if (last_tx_us != nullptr && ping_every > 0 && now - *last_tx_us >= ping_every) {
      Err e = ping(cfg);
      if (e != Err::Ok) return e;
      *last_tx_us = clock_.mono_us();
      continue;
    }
    int64_t wake = target_us;
    if (last_tx_us != nullptr && ping_every > 0 && *last_tx_us + ping_every < wake) wake = *last_tx_us + ping_every;
    if (last_tx_us != nullptr && inflight_count_ > 0) {  // read acknowledgements while waiting
      Err e = overdue(cfg, now);  // the oldest message's acknowledgement is later than ack_timeout_ms
      if (e != Err::Ok) return e;
      const int64_t limit = ack_deadline(cfg);
      if (limit < wake) wake = limit;
      e = await_packet(cfg, static_cast<uint32_t>((wake - now + 999) / 1000));
      if (e != Err::Ok && e != Err::RecvTimeout) return e;
      continue;
    }
    clock_.sleep_until_mono_us(wake);
  }
}

// MQTT 3.1.1 section 3.14.4: on DISCONNECT the broker closes the network connection. Waiting for
// that close means every message sent before DISCONNECT has reached it: closing at once would let
// the operating system (or the end of the process, or of a container's network namespace) throw
// away data still queued behind a slow or lossy link.
Err Publisher::wait_broker_close(uint32_t timeout_ms) {
  uint8_t sink[64];
  while (true) {
    size_t got = 0;
    Err e = transport_.read_some(sink, sizeof(sink), &got, timeout_ms);
    if (e == Err::PeerClosed) return Err::Ok;
    if (e == Err::RecvTimeout) {
      err_.set("the broker did not close the connection within %u ms after DISCONNECT: the last messages "
               "may not have arrived", static_cast<unsigned>(timeout_ms));
      return e;
    }
    if (e != Err::Ok) {
      transport_error(e, "waiting for the broker to close the connection failed");
      return e;
    }
  }
}

}  // namespace tb
