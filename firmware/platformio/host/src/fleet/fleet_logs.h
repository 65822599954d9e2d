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

// A device's send log: seq,t_send_us,bytes,t_intended_us. t_intended = intended0 + seq x interval.
class DeviceLog : public tb::SendObserver {
 public:
  static constexpr size_t kFlushBytes = 16 * 1024;  // x 5000 devices: 80 MB at most
  DeviceLog(LogWriter& writer, std::string path, int64_t intended0_us, uint64_t interval_us);
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes, int64_t puback_us) override;
  // Writes what is buffered (the header with the first write, also when no message was sent).
  bool flush();
  const std::string& error() const { return error_; }

 private:
  LogWriter& writer_;
  std::string path_;
  int64_t intended0_us_;
  uint64_t interval_us_;
  std::string buf_;
  bool created_ = false;
  std::string error_;
};

// Microseconds as milliseconds with 3 decimals; empty when not measured (negative).
std::string ms_field(int64_t us);

}  // namespace fleet
