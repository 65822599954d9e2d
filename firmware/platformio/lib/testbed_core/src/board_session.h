// One board's side of the serial control protocol (board_protocol.h): BANNER, READY, then RUN after
// RUN, each received in chunks, validated, published with the core's Publisher and the Transport
// classes, reported line by line, and answered by READY again. ONE boot serves a whole sweep.
// Used by the ESP32 firmware (Arduino Serial) and by board-emu (a pseudo-terminal).
#pragma once

#include <csignal>
#include <cstddef>
#include <cstdint>

#include "board_protocol.h"
#include "clock.h"
#include "plain_tcp.h"
#include "publisher.h"
#include "time_sync.h"
#include "tls_transport.h"
#include "transport.h"

namespace tb {

// The serial line as bytes.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads 1..cap bytes; Err::RecvTimeout when none arrived within timeout_ms, Err::PeerClosed when
  // the stream is gone for good.
  virtual Err read(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) = 0;
  virtual Err write(const uint8_t* data, size_t len) = 0;
};

// What the session asks the board beyond bytes and time.
class BoardPort {
 public:
  virtual ~BoardPort() = default;
  virtual uint32_t free_heap() = 0;
  virtual uint32_t min_free_heap() = 0;
  virtual int rssi() = 0;  // dBm of the WiFi link
  // Called before every write to the broker (board-emu injects its send jitter here).
  virtual void before_send() {}
  // The power trace's marker (publisher.h RunMarker): each connection's start and each PUBLISH.
  virtual void mark() {}
  // The run's radio power save (sleep_mode.h), before its first connection (the ESP32: esp_wifi_set_ps).
  virtual void power_save(PowerSave p) { (void)p; }
  // Between two connections of a run that is not persistent (Publisher's BetweenConnections): the board's
  // sleep until the next one's first message is due. The default is what a host can emulate
  // (emulate_sleep: a deep sleep forgets the transport but the session kept in *rtc).
  virtual Err sleep_between(SleepMode mode, int64_t due_mono_us, Transport& t, KeptSession* rtc, int* kept) {
    (void)due_mono_us;
    return emulate_sleep(t, mode, rtc, kept);
  }
};

// Optional: sits between the Publisher and each run's transport (PlainTcp or TlsTransport), e.g. to
// delay or record what passes through (board-emu's emulated network path). The firmware sets none.
class TransportFilter {
 public:
  virtual ~TransportFilter() = default;
  // Called once per run, after the run's transport was built and before anything uses it; returns
  // the transport the Publisher is to use (nullptr: the inner one unchanged).
  virtual Transport* attach(Transport& inner) = 0;
  // Called before the run's transport is destroyed.
  virtual void detach() = 0;
};

// The BANNER's facts. Values must not contain spaces (they are replaced by '_').
struct BoardInfo {
  uint32_t protocol = proto::kVersion;  // only tests announce another one
  const char* board = "-";              // "esp32dev", "emulated"
  const char* chip = "-";               // e.g. "ESP32-D0WD-V3-rev3"
  const char* mac = "-";
  const char* fw = "-";                 // firmware build id
  const char* arduino = "-";
  const char* idf = "-";
  const char* mbedtls = nullptr;        // nullptr: MBEDTLS_VERSION_STRING of this build
  uint32_t cpu_mhz = 0;
  const char* wifi_ps = "-";            // WiFi power save: none, min_modem, max_modem
  const char* hw_crypto = "-";          // what runs in hardware, e.g. "aes,sha,mpi"
  const char* sw_crypto = "-";          // what runs in software, e.g. "chacha20,poly1305"
  uint32_t rx_buf = 256;                // serial receive buffer, bytes (the host sizes chunks by it)
  // The board's own identity and topic, used when the RUN names none (the ESP32's build: TESTBED_DEVICE_ID,
  // TESTBED_TOPIC; board-emu: e1); nullptr: device_options.def's defaults.
  const char* device_id = nullptr;      // the payload's "d"
  const char* topic = nullptr;
};

class BoardSession : private SendObserver, private KeylogSink, private BetweenConnections, private RunMarker {
 public:
  // After DISCONNECT, how long the board waits for the broker's close (PublishConfig::drain_timeout_ms):
  // shorter than the host's limit on a silent board (orchestrator/publishers/board/publisher.py IDLE_S,
  // 30 s), so that a dead network fails the run by the board's own name (RecvTimeout), not by silence.
  static constexpr uint32_t kDrainTimeoutMs = 20000;

  // sync: the datagram socket for clock exchanges; nullptr refuses a RUN with sync_host.
  BoardSession(ByteStream& io, Clock& clock, SensorSource& sensors, BoardPort& port, const BoardInfo& info,
               Datagram* sync);
  ~BoardSession() override;
  BoardSession(const BoardSession&) = delete;
  BoardSession& operator=(const BoardSession&) = delete;

  void banner();  // BANNER line
  void ready();   // READY line
  void boot() {
    banner();
    ready();
  }
  // Reads what arrives within timeout_ms and answers each complete line; a RUN is carried out to
  // its end before poll returns. Err::PeerClosed once the stream is gone, else Ok.
  Err poll(uint32_t timeout_ms);
  // Stops a run before its next message (Err::Interrupted), e.g. from a signal handler.
  void set_stop_flag(const volatile sig_atomic_t* flag) { publisher_.set_stop_flag(flag); }
  // Installs a filter for the runs that start after this call (nullptr: none).
  void set_transport_filter(TransportFilter* filter) { filter_ = filter; }
  uint32_t runs() const { return runs_; }
  // What a RUN with this body meets before `ACK run` (parse_run_body, then this board's own checks:
  // cipher names, payload size, ...), without running it: board-emu --check-run. Ok, or the error
  // with its text in error_text(); run (unless nullptr): the RUN's configuration (its texts in body).
  Err check_run(char* body, size_t len, DeviceConfig* run = nullptr);
  const char* error_text() const { return err_.c_str(); }

 private:
  // The transport the Publisher sees: the run's PlainTcp or TlsTransport (behind the TransportFilter,
  // if one is set), with BoardPort::before_send.
  class BoardTransport : public Transport {
   public:
    explicit BoardTransport(BoardPort& port) : port_(port) {}
    void set(Transport* inner) { inner_ = inner; }
    Err open(const char* host, uint16_t p, uint32_t timeout_ms) override;
    Err write_all(const uint8_t* data, size_t len) override;
    Err read_some(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
    void close() override;
    void abort() override;
    void set_resumption(SessionResumption r) override;
    Err keep_session(KeptSession* out) override;
    Err restore_session(const KeptSession& in) override;
    void power_off() override;
    const char* error_text() const override;
    const TransportStats& stats() const override;

   private:
    BoardPort& port_;
    Transport* inner_ = nullptr;
    TransportStats none_;
  };

  void line(const char* fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
      ;
  void error(Err e, const char* text);
  void handle_line(char* text);
  void handle_run_line(const char* args);
  void execute(const DeviceConfig& r);
  Err prepare(const DeviceConfig& r, PublishConfig* cfg);
  void release_transport();
  void clock_exchange(const DeviceConfig& r, const char* phase);
  void print_handshake();
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes, int64_t puback_us) override;
  void on_connection(const ConnectionStats& c) override;  // CONN line (non-persistent runs)
  Err sleep(SleepMode mode, int64_t due_mono_us) override;  // the port's sleep_between
  void mark() override { port_.mark(); }
  void check_host_stop();
  void write_line(const char* keylog_line) override;

  ByteStream& io_;
  Clock& clock_;
  BoardPort& port_;
  BoardInfo info_;
  Datagram* sync_;
  BoardTransport board_transport_;
  Publisher publisher_;
  proto::RunReceiver receiver_;
  ErrorText err_;
  int64_t last_rx_us_ = 0;
  char in_[proto::kMaxHostLine + 1];
  size_t in_len_ = 0;
  bool in_overflow_ = false;
  char out_[ErrorText::kCapacity + 160];

  // The current run.
  static constexpr size_t kTransportSize =
      sizeof(TlsTransport) > sizeof(PlainTcp) ? sizeof(TlsTransport) : sizeof(PlainTcp);
  static constexpr size_t kTransportAlign =
      alignof(TlsTransport) > alignof(PlainTcp) ? alignof(TlsTransport) : alignof(PlainTcp);
  alignas(kTransportAlign) unsigned char transport_mem_[kTransportSize];
  Transport* transport_ = nullptr;  // constructed in transport_mem_ for one run
  TransportFilter* filter_ = nullptr;
  TransportFilter* attached_filter_ = nullptr;  // the filter of the current run
  RunStats stats_;
  ConnectionMode mode_ = ConnectionMode::Persistent;  // of the current run
  bool handshake_printed_ = false;
  uint32_t heap_before_ = 0;
  KeptSession rtc_;  // a deep sleep's kept session where the port emulates it (the ESP32 keeps its own in RTC)
  uint32_t sleeps_ = 0;
  uint32_t kept_ = 0;
  uint32_t runs_ = 0;
  volatile sig_atomic_t host_stop_ = 0;  // the host's STOP, read between messages
  char stop_buf_[16];
  size_t stop_len_ = 0;
  TimeSample samples_[proto::kMaxSyncCount];
};

}  // namespace tb
