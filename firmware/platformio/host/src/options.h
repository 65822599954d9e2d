// vdevice command-line options (flags override TESTBED_* environment variables).
#pragma once

#include <cstdint>
#include <string>

#include "connection_mode.h"
#include "publisher.h"

namespace vdev {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: 1883 for plain, 8883 for tls
  std::string transport = "plain";
  std::string ciphers = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256";
  std::string ca, server_name, cert, key, username, password;
  bool has_username = false, has_password = false;
  uint32_t payload = 65;
  uint32_t samples = 200;
  uint64_t interval_us = 1000000;  // --interval-ms accepts decimals (0.5 = 500 us)
  uint8_t qos = 0;
  std::string device_id = "v1";
  std::string topic = "testbed/sensors";
  std::string client_id;  // default: "vdevice-" + device id
  std::string keylog, send_log, summary;
  uint64_t seed = 1;
  uint32_t connect_timeout_ms = 10000;
  tb::ConnectionMode connection = tb::ConnectionMode::Persistent;
  uint32_t per_connection = 1;  // K, ignored for persistent
  tb::CloseMode close = tb::CloseMode::Disconnect;
  std::string connections_log;  // CSV, one row per connection
};

// Parses argv and the environment. On failure returns false and sets error (one line);
// on --help sets help = true.
bool parse_options(int argc, char** argv, Options* out, std::string* error, bool* help);
const char* usage();

// The core's publish configuration of these options (strings point into o: keep o alive).
tb::PublishConfig publish_config(const Options& o);

}  // namespace vdev
