// One device's configuration: every entry of device_options.def as a typed field named as in the .def,
// generated from the table (a new .def line is a new field, with no other edit), filled by ONE function,
// its constructor from opt::Values, from the values a program was given: vdevice's and the fleet's command line
// (host/src/common/options.h) and the board's RUN body (board_protocol.h parse_run_body). Every default is
// the .def's: no field here or in PublishConfig (publisher.h, the publisher's view, built from this in one
// place: its constructor) restates one.
// Portable core: no allocation, no std::string (the ESP32 uses it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_options.h"

namespace tb {

// Field types by kind: UINT uint64_t, MS double, ENUM and TEXT const char* (the text given, else the .def's
// default; "" = unset), FLAG bool. given(Id) says whether the program was given the option.
struct DeviceConfig {
#define TB_OPT_UINT(n, lo, hi, d) uint64_t n;
#define TB_OPT_MS(n, lo, hi, d) double n;
#define TB_OPT_ENUM(n, c, d) const char* n;
#define TB_OPT_TEXT(n, d) const char* n;
#define TB_OPT_FLAG(n) bool n;
#include "device_options.def"
#include "device_options_end.h"

  uint8_t program;    // whose options these are: TB_VDEVICE, TB_FLEET or TB_BOARD
  opt::Values values; // as given (the texts point into the program's argv, environment or RUN body)

  // THE one place a program's option values become its configuration: every field from v, the .def's default
  // where v has none (device_config.cpp, generated from the .def). v's texts must have passed opt::valid and
  // must outlive this.
  DeviceConfig(const opt::Values& v, uint8_t program_);
  // The .def's defaults (nothing given).
  explicit DeviceConfig(uint8_t program_ = TB_VDEVICE) : DeviceConfig(opt::Values(), program_) {}
  bool given(opt::Id option) const { return values.given(option); }
  // The text of a Text option when it was given, else nullptr (an unset option: no username, no CA, ...).
  const char* given_text(opt::Id option) const { return values.raw(option); }
};

}  // namespace tb
