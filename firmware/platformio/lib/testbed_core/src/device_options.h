// The device programs' options as ONE table (device_options.def): vdevice's and fleet's command line and
// the board's RUN body keys all come from it. Here: the table (tb::opt::kSpecs, indexed by tb::opt::Id),
// the check of a value against its entry's kind and range, and the values a program was given.
// Portable core: no allocation, no std::string (the board's RUN parser uses it on the ESP32).
#pragma once

#include <cstddef>
#include <cstdint>

// The programs of device_options.def's TB_PROGRAMS lines (bits).
#define TB_VDEVICE 1u
#define TB_FLEET 2u
#define TB_BOARD 4u

namespace tb {
namespace opt {

enum class Kind : uint8_t { Uint, Ms, Enum, Text, Flag };

struct Spec {
  const char* name;      // snake_case: the RUN key; argv --name-with-dashes; TESTBED_NAME
  Kind kind;
  uint8_t programs;      // TB_VDEVICE | TB_FLEET | TB_BOARD
  uint64_t min, max, def;  // Uint
  double dmin, dmax, ddef;  // Ms
  const char* min_text;  // Ms: the literals as the .def writes them (messages, JSON)
  const char* max_text;
  const char* def_text;  // Ms: the default's literal; Enum, Text: the default ("" = unset)
  const char* choices;   // Enum: "a|b|c"
};

// Every entry's index, named as in the .def: Id::payload, Id::close, ...
enum class Id : uint16_t {
#define TB_OPT_UINT(n, lo, hi, d) n,
#define TB_OPT_MS(n, lo, hi, d) n,
#define TB_OPT_ENUM(n, c, d) n,
#define TB_OPT_TEXT(n, d) n,
#define TB_OPT_FLAG(n) n,
#include "device_options.def"
#include "device_options_end.h"
};

inline constexpr Spec kSpecs[] = {
#define TB_OPT_UINT(n, lo, hi, d) \
  {#n, Kind::Uint, static_cast<uint8_t>(TB_PROGRAMS), static_cast<uint64_t>(lo), static_cast<uint64_t>(hi), \
   static_cast<uint64_t>(d), 0.0, 0.0, 0.0, nullptr, nullptr, nullptr, nullptr},
#define TB_OPT_MS(n, lo, hi, d) \
  {#n, Kind::Ms, static_cast<uint8_t>(TB_PROGRAMS), 0, 0, 0, lo, hi, d, #lo, #hi, #d, nullptr},
#define TB_OPT_ENUM(n, c, d) \
  {#n, Kind::Enum, static_cast<uint8_t>(TB_PROGRAMS), 0, 0, 0, 0.0, 0.0, 0.0, nullptr, nullptr, d, c},
#define TB_OPT_TEXT(n, d) \
  {#n, Kind::Text, static_cast<uint8_t>(TB_PROGRAMS), 0, 0, 0, 0.0, 0.0, 0.0, nullptr, nullptr, d, nullptr},
#define TB_OPT_FLAG(n) \
  {#n, Kind::Flag, static_cast<uint8_t>(TB_PROGRAMS), 0, 1, 0, 0.0, 0.0, 0.0, nullptr, nullptr, nullptr, nullptr},
#include "device_options.def"
#include "device_options_end.h"
};

constexpr size_t kCount = sizeof(kSpecs) / sizeof(kSpecs[0]);
constexpr const Spec& spec(Id id) { return kSpecs[static_cast<size_t>(id)]; }
constexpr Id id_at(size_t index) { return static_cast<Id>(index); }
inline const char* kind_name(Kind k) {
  return k == Kind::Uint ? "uint" : k == Kind::Ms ? "ms" : k == Kind::Enum ? "enum" : k == Kind::Text ? "text" : "flag";
}

// The entry called name[0..len) among those `program` takes (nullptr: none). argv: dashes = true, the
// name written with '-' for '_' ("server-name").
const Spec* find(const char* name, size_t len, uint8_t program, bool dashes);

// Whether text is a value of s (Text: always).
bool valid(const Spec& s, const char* text);

// What s takes, for a message: "an integer 1..4096", "milliseconds 0..3600000 (decimals allowed)",
// "plain or tls", "persistent, reconnect, resume-id or resume-ticket"; "" for Text.
void expected(const Spec& s, char* out, size_t cap);

// The values a program was given, by entry (nullptr: not given); text must outlive this. Typed reads
// return the .def's default when the value was not given; valid() must have accepted the text.
class Values {
 public:
  void set(Id id, const char* text) { text_[static_cast<size_t>(id)] = text; }
  bool given(Id id) const { return text_[static_cast<size_t>(id)] != nullptr; }
  const char* raw(Id id) const { return text_[static_cast<size_t>(id)]; }  // nullptr: not given
  const char* text(Id id) const;   // Text, Enum (the default when not given)
  uint64_t uint(Id id) const;      // Uint, Flag
  double decimal(Id id) const;     // Ms
  size_t choice(Id id) const;      // Enum: the index among the choices

 private:
  const char* text_[kCount] = {};
};

}  // namespace opt
}  // namespace tb
