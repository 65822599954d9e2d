// The host programs' command lines (vdevice, fleet) from the one option table,
// lib/testbed_core/src/device_options.def: --name-with-dashes VALUE or --name=VALUE, or the environment
// variable TESTBED_NAME (flags win), each checked against its entry. And vdevice's options.
#pragma once

#include <cstdint>
#include <string>

#include "connection_mode.h"
#include "device_options.h"
#include "publisher.h"
#include "tb_error.h"

namespace vdev {

// Filled by options_from: the defaults are the table's.
struct Options {
  std::string host;
  uint16_t port = 0;  // 1883 for plain, 8883 for tls unless given
  std::string transport;
  std::string ciphers;
  std::string ca, server_name, cert, key, username, password;  // ca, cert, key: files
  bool has_username = false, has_password = false;
  uint32_t payload = 0;
  uint32_t samples = 0;
  uint64_t interval_us = 0;  // --interval-ms accepts decimals (0.5 = 500 us)
  uint8_t qos = 0;
  std::string device_id;
  std::string topic;
  std::string client_id;  // default: "vdevice-" + device id
  std::string keylog, send_log, summary;
  uint64_t seed = 0;
  uint32_t connect_timeout_ms = 0;
  tb::ConnectionMode connection = tb::ConnectionMode::Persistent;
  uint32_t per_connection = 0;  // K, ignored for persistent
  uint64_t sleep_us = 0;        // between connections (last message -> next first); 0: one interval
  tb::CloseMode close = tb::CloseMode::Disconnect;
  std::string connections_log;  // CSV, one row per connection
  uint8_t mqtt_level = 4;       // --mqtt 3.1.1 (4) | 5
  bool clean_session = true;    // --session clean | persistent
  uint32_t session_expiry_s = 0;
  bool topic_alias = false;     // --topic-alias on (MQTT 5)
  uint16_t inflight = 1;
  uint32_t ack_timeout_ms = 10000;
  tb::ReconnectPolicy reconnect = tb::ReconnectPolicy::Off;  // --reconnect off|immediate|backoff
  uint32_t reconnect_base_ms = 500, reconnect_cap_ms = 8000;
  tb::opt::Values values;       // every option as given (device_options.def)
};

// What a host program is asked to do besides its options.
struct Mode {
  bool help = false;      // --help, -h
  bool check = false;     // --check: validate everything that needs no network, print ok (exit 0 / 2)
  bool describe = false;  // --describe-options: the option table as JSON
};

// The TESTBED_* variables, then argv, of the options `program` (TB_VDEVICE, TB_FLEET) takes, each
// checked against its table entry; values point into argv and the environment. false with a one-line
// error naming the option ("--payload: expected an integer 1..4096, got \"0\"").
bool parse_args(int argc, char** argv, uint8_t program, const char* prog, tb::opt::Values* values, Mode* mode,
                std::string* error);

// vdevice's options (also the fleet's connection options) from the values; reads --password-file and
// checks what goes together. false with a one-line error.
bool options_from(const tb::opt::Values& values, Options* out, std::string* error);

// Parses argv and the environment (parse_args + options_from). false with a one-line error.
bool parse_options(int argc, char** argv, Options* out, std::string* error, Mode* mode);
std::string usage();

// The options `program` takes, generated from the table, for --help.
std::string options_help(uint8_t program);
// The whole table as JSON: [{"name","kind","min","max","default","choices","programs"}...].
std::string describe_options();

// What can be checked of the TLS options without a network: the cipher names and that the CA parses.
tb::Err check_tls(const Options& o, const std::string& ca_pem, std::string* error);

// The core's publish configuration of these options (strings point into o: keep o alive).
tb::PublishConfig publish_config(const Options& o);

}  // namespace vdev
