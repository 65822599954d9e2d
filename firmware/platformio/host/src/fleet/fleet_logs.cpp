#include "fleet_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace fleet {
namespace {

bool write_fd(int fd, const char* data, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

const char kSendLogHeader[] = "seq,t_send_us,bytes,t_intended_us";
const char kConnectionsHeader[] = "device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error";

SharedKeylog::~SharedKeylog() {
  if (fd_ >= 0) ::close(fd_);
}

bool SharedKeylog::open(const std::string& path, std::string* error) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ >= 0 && fchmod(fd_, 0600) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (fd_ < 0) {
    *error = "cannot open key log " + path + ": " + strerror(errno);
    return false;
  }
  return true;
}

void SharedKeylog::write_line(const char* line) {
  char buf[256];
  int n = snprintf(buf, sizeof(buf), "%s\n", line);
  if (n < 0 || static_cast<size_t>(n) >= sizeof(buf)) {
    failed_ = true;
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || !write_fd(fd_, buf, static_cast<size_t>(n))) failed_ = true;
}

bool LogWriter::write(const std::string& path, const std::string& data, bool truncate, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  bool ok = write_fd(fd, data.data(), data.size());
  int saved = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) *error = "writing " + path + " failed: " + strerror(saved ? saved : errno);
  return ok;
}

DeviceLog::DeviceLog(LogWriter& writer, std::string path, int64_t intended0_us, const Schedule& schedule,
                     std::string device, std::string connections_path)
    : writer_(writer), path_(std::move(path)), intended0_us_(intended0_us), schedule_(schedule),
      device_(std::move(device)), connections_path_(std::move(connections_path)) {
  buf_.reserve(4096);
}

bool start_connections_log(LogWriter& writer, const std::string& path, std::string* error) {
  return writer.write(path, std::string("device,") + vdev::kConnectionsLogHeader + "\n", true, error);
}

void DeviceLog::on_connection(const tb::ConnectionStats& c) {
  ++connections_;
  if (c.resumed == 1) ++resumed_;
  if (connections_path_.empty()) return;
  char line[320];
  vdev::format_connection_row(c, line, sizeof(line));
  conn_buf_ += device_ + "," + line + "\n";
}

bool DeviceLog::on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t, int64_t) {
  char line[96];
  const int64_t intended = intended0_us_ + schedule_.offset_us(seq);
  int n = snprintf(line, sizeof(line), "%" PRIu32 ",%" PRId64 ",%zu,%" PRId64 "\n", seq, t_send_us, payload_bytes,
                   intended);
  buf_.append(line, n > 0 ? static_cast<size_t>(n) : 0);
  return buf_.size() < kFlushBytes || flush();
}

bool DeviceLog::flush() {
  if (!created_) buf_.insert(0, std::string(kSendLogHeader) + "\n");
  bool ok = writer_.write(path_, buf_, !created_, &error_);
  created_ = true;
  buf_.clear();
  if (!conn_buf_.empty()) {
    std::string e;
    if (!writer_.write(connections_path_, conn_buf_, false, &e) && ok) {
      error_ = e;
      ok = false;
    }
    conn_buf_.clear();
  }
  return ok;
}

std::string ms_field(int64_t us) {
  if (us < 0) return "";
  char buf[32];
  snprintf(buf, sizeof(buf), "%" PRId64 ".%03" PRId64, us / 1000, us % 1000);
  return buf;
}

}  // namespace fleet
