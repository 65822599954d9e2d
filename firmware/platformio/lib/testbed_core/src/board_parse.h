// Internal to the board protocol's sources (board_protocol.cpp, board_run_body.cpp): small parsers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tb {
namespace proto {
namespace detail {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Decimal digits only (no sign, no spaces), value <= max.
bool parse_uint(const char* s, size_t len, uint64_t max, uint64_t* out);

}  // namespace detail
}  // namespace proto
}  // namespace tb
