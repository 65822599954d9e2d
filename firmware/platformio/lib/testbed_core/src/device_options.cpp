#include "device_options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "board_parse.h"

namespace tb {
namespace opt {
namespace {

// The i-th word of an Enum's "a|b|c" (false past the last); *word, *len point into choices.
bool choice_at(const char* choices, size_t i, const char** word, size_t* len) {
  const char* p = choices;
  for (size_t k = 0; k < i; ++k) {
    p = strchr(p, '|');
    if (p == nullptr) return false;
    ++p;
  }
  const char* bar = strchr(p, '|');
  *word = p;
  *len = bar != nullptr ? static_cast<size_t>(bar - p) : strlen(p);
  return true;
}

// The index of text among s's choices, or -1.
long choice_index(const Spec& s, const char* text) {
  const char* word = nullptr;
  size_t len = 0;
  for (size_t i = 0; choice_at(s.choices, i, &word, &len); ++i) {
    if (strlen(text) == len && strncmp(text, word, len) == 0) return static_cast<long>(i);
  }
  return -1;
}

bool parse_decimal(const char* text, double* out) {
  errno = 0;
  char* end = nullptr;
  const double v = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_uint(const char* text, uint64_t max, uint64_t* out) {
  return proto::detail::parse_uint(text, strlen(text), max, out);
}

}  // namespace

const Spec* find(const char* name, size_t len, uint8_t program, bool dashes) {
  for (const Spec& s : kSpecs) {
    if ((s.programs & program) == 0 || strlen(s.name) != len) continue;
    size_t i = 0;
    for (; i < len; ++i) {
      const char want = dashes && s.name[i] == '_' ? '-' : s.name[i];
      if (name[i] != want) break;
    }
    if (i == len) return &s;
  }
  return nullptr;
}

bool valid(const Spec& s, const char* text) {
  uint64_t u = 0;
  double d = 0;
  switch (s.kind) {
    case Kind::Uint: return parse_uint(text, s.max, &u) && u >= s.min;
    case Kind::Flag: return parse_uint(text, 1, &u);
    case Kind::Ms: return parse_decimal(text, &d) && d >= s.dmin && d <= s.dmax;
    case Kind::Enum: return choice_index(s, text) >= 0;
    case Kind::Text: return true;
  }
  return false;
}

void expected(const Spec& s, char* out, size_t cap) {
  switch (s.kind) {
    case Kind::Uint:
      snprintf(out, cap, "an integer %llu..%llu", static_cast<unsigned long long>(s.min),
               static_cast<unsigned long long>(s.max));
      return;
    case Kind::Flag: snprintf(out, cap, "0 or 1"); return;
    case Kind::Ms: {
      const size_t n = strlen(s.name);
      const bool ms = n > 3 && strcmp(s.name + n - 3, "_ms") == 0;
      snprintf(out, cap, "%s %s..%s (decimals allowed)", ms ? "milliseconds" : "a number", s.min_text, s.max_text);
      return;
    }
    case Kind::Enum: {
      size_t used = 0;
      const char* word = nullptr;
      size_t len = 0;
      size_t count = 0;
      while (choice_at(s.choices, count, &word, &len)) ++count;
      out[0] = '\0';
      for (size_t i = 0; i < count && choice_at(s.choices, i, &word, &len) && used < cap; ++i) {
        const char* sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        const int w = snprintf(out + used, cap - used, "%s%.*s", sep, static_cast<int>(len), word);
        if (w < 0) break;
        used += static_cast<size_t>(w);
      }
      return;
    }
    case Kind::Text: out[0] = '\0'; return;
  }
}

const char* Values::text(Id id) const {
  const char* t = raw(id);
  return t != nullptr ? t : spec(id).def_text != nullptr ? spec(id).def_text : "";
}

uint64_t Values::uint(Id id) const {
  uint64_t v = spec(id).def;
  if (raw(id) != nullptr) parse_uint(raw(id), UINT64_MAX, &v);
  return v;
}

double Values::decimal(Id id) const {
  double v = spec(id).ddef;
  if (raw(id) != nullptr) parse_decimal(raw(id), &v);
  return v;
}

size_t Values::choice(Id id) const {
  const long i = choice_index(spec(id), text(id));
  return i < 0 ? 0 : static_cast<size_t>(i);
}

}  // namespace opt
}  // namespace tb
