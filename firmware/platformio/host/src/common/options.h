// The host programs' command lines (vdevice, fleet) from the one option table,
// lib/testbed_core/src/device_options.def: --name-with-dashes VALUE or --name=VALUE, or the environment
// variable TESTBED_NAME (flags win), each checked against its entry. And vdevice's options.
#pragma once

#include <cstdint>
#include <string>

#include "connection_mode.h"
#include "device_config.h"
#include "device_options.h"
#include "publisher.h"
#include "tb_error.h"

namespace vdev {

// vdevice's (and each fleet device's) configuration, filled by options_from: the core's DeviceConfig (every
// option of device_options.def, the defaults the table's) and its publisher's view, with what the host
// programs decide themselves. Holds pointers into itself: not copied.
struct Options {
  tb::DeviceConfig config;        // every option, as given or the .def's default
  std::string password;           // --password, or the first line of --password-file
  std::string client_id;          // --client-id, or "vdevice-" + the device id
  tb::PublishConfig publish{config};  // PublishConfig(config), its client id and password the two above

  Options() = default;
  Options(const Options&) = delete;
  Options& operator=(const Options&) = delete;
  bool tls() const;
  bool websocket() const;  // --mqtt-transport websocket: MQTT over WebSocket over the TCP or TLS stream  // --transport tls
};

// What a host program is asked to do besides its options.
struct Mode {
  bool help = false;      // --help, -h
  bool check = false;     // --check: validate everything that needs no network, print ok (exit 0 / 2)
  bool describe = false;  // --describe-options: the option table as JSON
  bool show = false;      // --show-config: the configuration the options make (config_json), then exit
};

// The TESTBED_* variables, then argv, of the options `program` (TB_VDEVICE, TB_FLEET) takes, each
// checked against its table entry; values point into argv and the environment. false with a one-line
// error naming the option ("--payload: expected an integer 1..4096, got \"0\"").
bool parse_args(int argc, char** argv, uint8_t program, const char* prog, tb::opt::Values* values, Mode* mode,
                std::string* error);

// vdevice's options (also the fleet's connection options) from the values; reads --password-file and
// checks what goes together. false with a one-line error.
bool options_from(const tb::opt::Values& values, uint8_t program, Options* out, std::string* error);

// Parses argv and the environment (parse_args + options_from). false with a one-line error.
bool parse_options(int argc, char** argv, Options* out, std::string* error, Mode* mode);
std::string usage();

// The options `program` takes, generated from the table, for --help.
std::string options_help(uint8_t program);
// The whole table as JSON: [{"name","kind","min","max","default","choices","programs"}...].
std::string describe_options();
// A configuration as JSON, generated from the table: {"name": value} of every option its program takes, as
// DeviceConfig holds it (the given value or the .def's default); password and key shown as "***" when given.
std::string config_json(const tb::DeviceConfig& c);

// What can be checked of the TLS options without a network: the cipher names and that the CA parses.
tb::Err check_tls(const Options& o, const std::string& ca_pem, std::string* error);


}  // namespace vdev
