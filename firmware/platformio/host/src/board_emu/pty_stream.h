// The emulated board's serial port: the master side of a pseudo-terminal in raw mode.
//
// Like an Arduino's UART it has a receive buffer of a fixed size (default 256 bytes): whatever the
// host writes while that buffer is full is DROPPED (counted), so a host that does not wait for the
// board's ACKs loses bytes exactly as it would on a real board. Like a USB-UART bridge it drops
// the board's output while no host has the port open. With reset_on_open, the host opening the
// port is reported as a reset (an ESP32 DevKit resets when DTR/RTS toggle on open).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "board_session.h"

namespace vdev {

class PtyStream : public tb::ByteStream {
 public:
  PtyStream(size_t rx_buffer, bool reset_on_open) : rx_cap_(rx_buffer), reset_on_open_(reset_on_open) {}
  ~PtyStream() override { close(); }
  PtyStream(const PtyStream&) = delete;
  PtyStream& operator=(const PtyStream&) = delete;

  bool open(std::string* error);
  const std::string& slave_path() const { return slave_; }
  void close();

  tb::Err read(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override;
  tb::Err write(const uint8_t* data, size_t len) override;

  // A reset is pending (the host opened the port, or request_reset()): output is muted until
  // reset_done(), reads time out at once so the session returns to the caller.
  bool reset_pending() const { return reset_pending_; }
  void request_reset() { reset_pending_ = true; }
  // Starts the new boot: forgets received and unsent bytes, unmutes the output.
  void reset_done();
  bool host_connected();
  // Waits up to timeout_ms for the host to open the port (only meaningful with reset_on_open).
  void wait_host(uint32_t timeout_ms);
  uint64_t dropped() const { return dropped_; }
  // Called with every complete line the board wrote (without its '\n').
  void set_line_observer(std::function<void(const std::string&)> f) { on_line_ = std::move(f); }

 private:
  void update_connection();
  void drain();
  void pop(uint8_t* buf, size_t cap, size_t* got);

  size_t rx_cap_;
  bool reset_on_open_;
  int fd_ = -1;
  std::string slave_;
  bool connected_ = false;
  bool reset_pending_ = false;
  std::vector<uint8_t> ring_;  // the board's receive buffer (FIFO, at most rx_cap_ bytes)
  size_t ring_head_ = 0;
  size_t ring_size_ = 0;
  uint64_t dropped_ = 0;
  std::string out_line_;
  std::function<void(const std::string&)> on_line_;
};

}  // namespace vdev
