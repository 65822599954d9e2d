// The publish loop shared by the ESP32 and the virtual ESP32: connect, CONNECT/CONNACK,
// N PUBLISH on an absolute schedule (t0 + i * interval, no drift), DISCONNECT.
// The connection lifecycle (connection_mode.h): Persistent = one connection for the run (t0 = just
// after its CONNACK); Reconnect/ResumeId/ResumeTicket = a connection per K messages, opened at the
// scheduled time of its first message (t0 = just before the first connection is opened), ended after
// its K-th, none open in between; a slow connect makes messages late, never skipped.
#pragma once

#include <csignal>
#include <cstddef>
#include <cstdint>

#include "clock.h"
#include "connection_mode.h"
#include "device_config.h"
#include "mqtt_codec.h"
#include "payload.h"
#include "sleep_mode.h"
#include "transport.h"

namespace tb {

// The publisher's view of a device's configuration, built from it in ONE place, the constructor
// (publisher.cpp): its fields in the publisher's units and types (interval_us from the host programs'
// interval_ms or the board's interval_us, the connection lifecycle's words as enums, ...). No field has a
// default of its own: the defaults are device_options.def's, through DeviceConfig. A program then sets what
// it decides itself (vdevice's client id, the fleet's per-device ids, the board's own device id and topic).
struct PublishConfig {
  explicit PublishConfig(const DeviceConfig& c);
  // Not options (device_options.def has no entry for them): the core's own constants.
  static constexpr uint16_t kKeepaliveS = 60;
  static constexpr uint32_t kDrainTimeoutMs = 60000;
  static constexpr uint32_t kReconnectForMs = 60000;

  const char* host;
  uint16_t port;  // the .def's "none" (not given): 1883 plain, 8883 TLS
  const char* device_id;
  const char* topic;
  const char* client_id;  // not given: the device id
  const char* username;   // nullptr: none given
  const char* password;
  uint16_t keepalive_s;
  uint8_t qos;
  size_t payload_size;
  uint32_t samples;
  uint64_t interval_us;  // 0: back to back
  uint32_t connect_timeout_ms;
  uint32_t ack_timeout_ms;
  // after DISCONNECT: how long to wait for the broker to close the connection, i.e. to have
  // received every message sent before it (a slow or lossy link can hold seconds of data)
  uint32_t drain_timeout_ms;
  ConnectionMode mode;
  uint32_t per_connection;  // K messages per connection, >= 1; ignored for Persistent
  uint64_t sleep_us;  // between connections (last message -> next first); 0: one interval (scheduled_offset_us)
  CloseMode close;    // how every connection ends (Persistent's one too)
  PowerSave power_save;  // the radio's while connected (sleep_mode.h): the program applies it, not the loop
  SleepMode sleep_mode;  // between connections: the BetweenConnections hook is asked (not for Persistent)
  // MQTT version and session (publisher_session.cpp). level: mqtt::kLevel311 or kLevel5.
  uint8_t mqtt_level;
  // false: a persistent session (3.1.1 Clean Session 0; MQTT 5 Clean Start 0 with session_expiry_s):
  // a connection lost mid-run is opened again (for up to reconnect_for_ms) and the unacknowledged
  // messages are sent again with DUP, as the specification requires (3.1.1 4.4, MQTT 5 4.4).
  bool clean_session;
  uint32_t session_expiry_s;  // MQTT 5 only; ignored in 3.1.1 (the broker keeps the session)
  bool topic_alias;           // MQTT 5: topic alias 1; the PUBLISHes after the first carry an empty topic
  uint16_t inflight;          // QoS 1/2 messages sent and not yet acknowledged at most (1..kMaxInflight)
  uint32_t reconnect_for_ms;
  // What a lost or refused connection does (connection_mode.h ReconnectPolicy). Off: as above (only a
  // persistent session reopens). Immediate/Backoff: any session's lost connection is opened again and the
  // run goes on (QoS 0's message on the dead connection is lost; a persistent session resends), a refused
  // connect is tried again, each attempt after reconnect_pause_us; every connection is reported.
  ReconnectPolicy reconnect;
  uint32_t reconnect_base_ms;
  uint32_t reconnect_cap_ms;
  uint64_t reconnect_seed;  // the device's own (the fleet: per device)
};

// One connection of a run, reported when it has ended (SendObserver::on_connection).
struct ConnectionStats {
  uint32_t index = 0;       // 0, 1, ...: connection i carries messages i*K .. i*K+K-1
  int64_t t_open_us = -1;   // wall clock just before the transport was opened
  int64_t tcp_connect_us = -1;
  int64_t handshake_us = -1;  // TLS only
  int64_t connack_us = -1;    // CONNECT written -> CONNACK read
  int resumed = -1;           // TLS: 1 resumed, 0 full handshake (TransportStats::resumed); -1 plain / failed
  bool session_offered = false;
  bool connect_sent = false;  // its CONNECT was handed to the transport (the wire may show its client id)
  uint32_t messages = 0;      // PUBLISH handed to the transport on this connection
  HandshakePhases phases;     // TLS: the device's own handshake phases (TransportStats::phases), set once CONNECT is written
  CloseMode close{};         // the run's (PublishConfig::close), set when the connection opens
  Err error = Err::Ok;        // why the connection (and so the run) failed; Ok when it ended as planned
};

// The CONNECT options of a run: one builder for the check pass (Publisher::validate) and every
// connection (Publisher::connect), so the two cannot disagree.
mqtt::ConnectOptions connect_options(const PublishConfig& cfg);

// The link, not the broker's answer, ended a connection or refused to open one (a reconnect policy's case).
bool lost_link(Err e);

class SensorSource {
 public:
  virtual ~SensorSource() = default;
  virtual Err read(uint32_t seq, SensorReading* out) = 0;
};

class SendObserver {
 public:
  virtual ~SendObserver() = default;
  // Called once per message: at QoS 0 right after write_all, at QoS 1 and 2 when its exchange ended
  // (PUBACK, PUBCOMP) or was given up. puback_us: the time to PUBACK (QoS 1) or PUBCOMP (QoS 2) on the
  // board's monotonic clock (clock.mono_us() just before the first write_all(PUBLISH) -> just after the
  // whole PUBACK/PUBCOMP was read, resends included), -1 at QoS 0 or when none came. With an in-flight
  // window above 1 the calls follow the acknowledgements' order. false stops the run (Err::SendLog).
  virtual bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes,
                       int64_t puback_us) = 0;
  // Called once per connection after it ended (also a failed one, with its error), before the next opens.
  virtual void on_connection(const ConnectionStats& stats) { (void)stats; }
};

struct RunStats {
  // of the FIRST connection (set before its first on_sent)
  int64_t tcp_connect_us = -1;
  int64_t handshake_us = -1;
  int64_t connack_us = -1;  // CONNECT written -> CONNACK read
  uint32_t messages_sent = 0;
  uint32_t connections = 0;          // opened or attempted
  uint32_t resumed_connections = 0;  // with the client's claim resumed = 1
  uint32_t reconnects = 0;  // a persistent session's connections opened again after a loss
  uint32_t resent = 0;      // PUBLISH sent again with DUP (and PUBREL again) after such a reconnect
  uint32_t lost = 0;        // in-flight messages given up (the broker had no session, or the run failed)
};

// One QoS 1/2 message between its PUBLISH and its PUBACK/PUBCOMP. Its payload is made again from these
// fields for a resend (payload_encode is deterministic), so the store holds no payload bytes.
struct InFlight {
  uint32_t seq = 0;
  int64_t t_send_us = 0;
  int64_t handed_us = 0;  // monotonic, just before the first PUBLISH was handed to the transport
  SensorReading reading;
  size_t mqtt_bytes = 0;  // the first PUBLISH's bytes
  uint16_t id = 0;
  uint8_t state = 0;  // 0 free, 1 awaiting PUBACK (QoS 1) or PUBREC (QoS 2), 2 awaiting PUBCOMP
  uint32_t resent_at_reconnect = 0;  // RunStats::reconnects when it was last sent again
  int64_t sent_us = 0;  // monotonic, its last (re)send: the ack timeout counts from here
};

// Between two connections of a run that is not persistent (sleep_mode.h): called once the last one has
// ended, with the monotonic time the next one's first message is due; the publisher then waits out what is
// left (wait_until). The ESP32 sleeps there (src/main.cpp); vdevice and board-emu emulate it (emulate_sleep).
// An error ends the run.
class BetweenConnections {
 public:
  virtual ~BetweenConnections() = default;
  virtual Err sleep(SleepMode mode, int64_t due_mono_us) = 0;
};

// A power trace's marker (docs/energy.md): called just before each connection is opened and just before each
// PUBLISH is handed to the transport (the board drives a GPIO high; the firmware's build option TESTBED_MARKER_PIN).
class RunMarker {
 public:
  virtual ~RunMarker() = default;
  virtual void mark() = 0;
};

// What a host can emulate of a sleep between connections, on the transport the publisher uses: a deep sleep
// keeps the TLS session in `rtc` (the bytes RTC memory would hold), forgets everything else the transport
// holds (power_off) and restores the session from those bytes alone, so that the next connection resumes
// it from what a wake would find. Stay and light: nothing (a host's radio and CPU do not sleep). *kept: 1
// when a deep sleep kept a session, else 0.
Err emulate_sleep(Transport& t, SleepMode mode, KeptSession* rtc, int* kept);

class Publisher {
 public:
  static constexpr size_t kPacketCapacity = kMaxPayload + 512;
  static constexpr uint16_t kMaxInflight = 256;  // the in-flight store's slots (device_options.def: inflight)

  Publisher(Transport& transport, Clock& clock, SensorSource& sensors, SendObserver& observer)
      : transport_(transport), clock_(clock), sensors_(sensors), observer_(observer) {}

  // Checks the configuration without touching the network (the PUBLISH and CONNECT are encoded once).
  Err validate(const PublishConfig& cfg);
  // The CONNECT the last validate() encoded (0 bytes when it failed before); valid until run() or the
  // next validate() reuses the packet buffer. For tests: it must equal what each connection sends.
  size_t checked_connect(const uint8_t** bytes) const;
  Err run(const PublishConfig& cfg, RunStats* stats);
  // A flag (set from a signal handler) that stops the run before the next message: Err::Interrupted.
  void set_stop_flag(const volatile sig_atomic_t* flag) { stop_ = flag; }
  // A second such flag, for whoever drives the run (the board session: the host's STOP command).
  void set_driver_stop_flag(const volatile sig_atomic_t* flag) { driver_stop_ = flag; }
  // The sleep between connections (nullptr: none, the wait alone).
  void set_between(BetweenConnections* b) { between_ = b; }
  // The marker (nullptr: none).
  void set_marker(RunMarker* m) { marker_ = m; }
  const char* error_text() const { return err_.c_str(); }

 private:
  bool protocol_ok(const PublishConfig& cfg);
  Err connect(const PublishConfig& cfg, ConnectionStats* cs);
  Err encode_connect_packet(const PublishConfig& cfg, size_t* len);  // into packet_
  Err connection(const PublishConfig& cfg, int64_t* t0, uint32_t* first, uint32_t count, ConnectionStats* cs,
                 RunStats* stats);
  Err publish_one(const PublishConfig& cfg, uint32_t seq, int64_t* last_tx, RunStats* stats);
  Err end_connection(const PublishConfig& cfg, Err e);
  Err interrupted(const PublishConfig& cfg, uint32_t seq);
  Err read_packet(uint32_t timeout_ms, size_t* len);
  Err wait_broker_close(uint32_t timeout_ms);
  Err ping(const PublishConfig& cfg);
  // publisher_session.cpp: the in-flight window, acknowledgements, a persistent session's recovery.
  Err send_publish(const PublishConfig& cfg, const InFlight& m, uint8_t qos, bool dup, size_t* len);
  InFlight* new_inflight(uint32_t seq);
  Err handle_packet(const PublishConfig& cfg, size_t len, bool* pingresp);
  Err await_packet(const PublishConfig& cfg, uint32_t timeout_ms);
  Err drain(const PublishConfig& cfg, uint16_t keep);
  Err overdue(const PublishConfig& cfg, int64_t now);
  const InFlight* oldest() const;
  int64_t ack_deadline(const PublishConfig& cfg) const;  // the earliest last send + ack timeout
  void complete(InFlight* m, int64_t ack_us);
  void give_up_inflight();
  Err resend_inflight(const PublishConfig& cfg);
  bool recoverable(const PublishConfig& cfg, Err e) const;
  Err recover(const PublishConfig& cfg, Err lost, int64_t* last_tx, RunStats* stats, ConnectionStats* cs,
              uint32_t* cs_first);
  Err reopen(const PublishConfig& cfg, ConnectionStats* cs, Err failed);  // connect again, by the policy
  void report(const ConnectionStats& cs, RunStats* stats);
  Err read_connack(const PublishConfig& cfg, size_t rlen);
  Err broker_disconnect(size_t len);
  // last_tx_us: nullptr while no connection is open (no PINGREQ then)
  Err wait_until(const PublishConfig& cfg, int64_t target_us, int64_t* last_tx_us);
  Err transport_error(Err e, const char* what);

  Transport& transport_;
  Clock& clock_;
  SensorSource& sensors_;
  SendObserver& observer_;
  bool stop_requested() const {
    return (stop_ != nullptr && *stop_ != 0) || (driver_stop_ != nullptr && *driver_stop_ != 0);
  }

  const volatile sig_atomic_t* stop_ = nullptr;
  const volatile sig_atomic_t* driver_stop_ = nullptr;
  BetweenConnections* between_ = nullptr;
  RunMarker* marker_ = nullptr;
  ErrorText err_;
  uint16_t packet_id_ = 0;  // QoS 1/2, continues across the run's connections
  InFlight inflight_[kMaxInflight];
  uint16_t inflight_count_ = 0;
  uint16_t window_ = 1;        // min(cfg.inflight, the broker's Receive Maximum)
  uint16_t alias_max_ = 0;     // the broker's Topic Alias Maximum (MQTT 5 CONNACK)
  bool alias_set_ = false;     // alias 1 carries the topic on this connection
  bool session_present_ = false;
  RunStats* run_stats_ = nullptr;
  uint32_t rest_timeout_ms_ = 10000;
  size_t payload_size_ = 0;
  bool send_log_failed_ = false;
  bool wait_timed_out_ = false;  // the last wait for an acknowledgement ended by the transport's timeout
  uint32_t futile_recoveries_ = 0;  // recoveries in a row with no exchange completed in between
  uint32_t next_connection_ = 0;    // the index of the run's next connection
  uint64_t reconnect_rng_ = 0;      // splitmix64 state of the backoff's jitter
  size_t checked_connect_len_ = 0;  // the CONNECT validate() left in packet_
  char payload_[kMaxPayload + 1];
  uint8_t packet_[kPacketCapacity];
  uint8_t rx_[256];  // what the broker sends: CONNACK (MQTT 5: with properties), acks, PINGRESP, DISCONNECT
};

}  // namespace tb
