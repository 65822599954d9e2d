// The fleet's files: the shared NSS key log, each device's send log, the connections rows.
// File descriptors are the scarce thing: the core waits on its socket with select(), so every socket of
// the process must stay below FD_SETSIZE. A device's send log is therefore kept in memory and written
// (open, write, close) when the device ends or every kFlushBytes, one write at a time process-wide;
// only the key log stays open.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "connection_log.h"
#include "publisher.h"
#include "tls_transport.h"

namespace fleet {

extern const char kSendLogHeader[];
extern const char kConnectionsHeader[];

// One key log for every device: a line per handshake, one write(2) each under a mutex, O_APPEND (so the
// worker processes of a sharded fleet append whole lines too). Mode 0600: it decrypts the traffic.
class SharedKeylog : public tb::KeylogSink {
 public:
  ~SharedKeylog() override;
  bool open(const std::string& path, std::string* error);
  void write_line(const char* line) override;
  bool failed() const { return failed_.load(); }
  int fd() const { return fd_; }

 private:
  std::mutex mu_;
  int fd_ = -1;
  std::atomic<bool> failed_{false};
};

// Writes whole buffers to files, one at a time in the process (at most one extra descriptor).
class LogWriter {
 public:
  // truncate: a new file (0644); else appended. false with the error text.
  bool write(const std::string& path, const std::string& data, bool truncate, std::string* error);

 private:
  std::mutex mu_;
};

// When each message of a device is due, from its first: the core's schedule (tb::scheduled_offset_us).
struct Schedule {  // the run's (device_schedule: its PublishConfig's); Schedule(): none, for a log's header
  tb::ConnectionMode mode{};
  uint32_t per_connection{};
  uint64_t interval_us{};
  uint64_t sleep_us{};
  int64_t offset_us(uint32_t seq) const {
    return tb::scheduled_offset_us(mode, per_connection, interval_us, sleep_us, seq);
  }
};

// A device's send log: seq,t_send_us,bytes,t_intended_us (t_intended = intended0 + the schedule's offset of
// seq); and, when a connections log is kept, its connections' rows (device,conn,... appended to that file
// with the send log's flushes: one write each, O_APPEND, so the worker processes' rows never interleave).
class DeviceLog : public tb::SendObserver {
 public:
  static constexpr size_t kFlushBytes = 16 * 1024;  // x 10,000 devices (one host's most): 160 MB at most
  DeviceLog(LogWriter& writer, std::string path, int64_t intended0_us, const Schedule& schedule,
            std::string device = "", std::string connections_path = "");
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes, int64_t puback_us) override;
  void on_connection(const tb::ConnectionStats& c) override;
  // Writes what is buffered (the header with the first write, also when no message was sent).
  bool flush();
  const std::string& error() const { return error_; }
  uint32_t connections() const { return connections_; }
  uint32_t resumed() const { return resumed_; }

 private:
  LogWriter& writer_;
  std::string path_;
  int64_t intended0_us_;
  Schedule schedule_;
  std::string device_;
  std::string connections_path_;
  std::string buf_;
  std::string conn_buf_;
  uint32_t connections_ = 0;
  uint32_t resumed_ = 0;
  bool created_ = false;
  std::string error_;
};

// The connections log's header (the file made anew); false with the error.
bool start_connections_log(LogWriter& writer, const std::string& path, std::string* error);

// Microseconds as milliseconds with 3 decimals; empty when not measured (negative).
std::string ms_field(int64_t us);

}  // namespace fleet
