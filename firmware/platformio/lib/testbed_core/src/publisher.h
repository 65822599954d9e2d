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
#include "mqtt_codec.h"
#include "payload.h"
#include "transport.h"

namespace tb {

struct PublishConfig {
  const char* host = nullptr;
  uint16_t port = 1883;
  const char* device_id = "v1";
  const char* topic = "testbed/sensors";
  const char* client_id = "v1";
  const char* username = nullptr;
  const char* password = nullptr;
  uint16_t keepalive_s = 60;
  uint8_t qos = 0;
  size_t payload_size = 65;
  uint32_t samples = 200;
  uint64_t interval_us = 1000000;  // 0: back to back
  uint32_t connect_timeout_ms = 10000;
  uint32_t ack_timeout_ms = 10000;
  // after DISCONNECT: how long to wait for the broker to close the connection, i.e. to have
  // received every message sent before it (a slow or lossy link can hold seconds of data)
  uint32_t drain_timeout_ms = 60000;
  ConnectionMode mode = ConnectionMode::Persistent;
  uint32_t per_connection = 1;  // K messages per connection, >= 1; ignored for Persistent
  CloseMode close = CloseMode::Disconnect;  // how every connection ends (Persistent's one too)
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
  uint32_t messages = 0;      // PUBLISH handed to the transport on this connection
  CloseMode close = CloseMode::Disconnect;
  Err error = Err::Ok;        // why the connection (and so the run) failed; Ok when it ended as planned
};

// The CONNECT options of a run: one builder for the check pass (Publisher::validate) and every
// connection (Publisher::connect), so the two cannot disagree.
mqtt::ConnectOptions connect_options(const PublishConfig& cfg);

class SensorSource {
 public:
  virtual ~SensorSource() = default;
  virtual Err read(uint32_t seq, SensorReading* out) = 0;
};

class SendObserver {
 public:
  virtual ~SendObserver() = default;
  // Called once per PUBLISH handed to the transport: at QoS 0 right after write_all, at QoS 1 after
  // the wait for its PUBACK (also when that wait failed). puback_us: the PUBACK round trip on the
  // board's monotonic clock (clock.mono_us() just before write_all(PUBLISH) -> just after the whole
  // PUBACK was read), -1 at QoS 0 or when no PUBACK came. false stops the run (Err::SendLog).
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
};

class Publisher {
 public:
  static constexpr size_t kPacketCapacity = kMaxPayload + 512;

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
  const char* error_text() const { return err_.c_str(); }

 private:
  Err connect(const PublishConfig& cfg, ConnectionStats* cs);
  Err encode_connect_packet(const PublishConfig& cfg, size_t* len);  // into packet_
  Err connection(const PublishConfig& cfg, int64_t* t0, uint32_t first, uint32_t count, ConnectionStats* cs,
                 RunStats* stats);
  Err publish_one(const PublishConfig& cfg, uint32_t seq, int64_t* last_tx, RunStats* stats);
  Err end_connection(const PublishConfig& cfg, Err e);
  Err interrupted(const PublishConfig& cfg, uint32_t seq);
  Err read_packet(uint32_t timeout_ms, size_t* len);
  Err wait_broker_close(uint32_t timeout_ms);
  Err ping(const PublishConfig& cfg);
  Err wait_puback(const PublishConfig& cfg, uint16_t id);
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
  ErrorText err_;
  uint16_t packet_id_ = 0;  // QoS 1, continues across the run's connections
  size_t checked_connect_len_ = 0;  // the CONNECT validate() left in packet_
  char payload_[kMaxPayload + 1];
  uint8_t packet_[kPacketCapacity];
  uint8_t rx_[64];
};

}  // namespace tb
