// Small helpers the host programs share (vdevice, fleet): whole-file reads, JSON strings, unsigned
// integer options.
#pragma once

#include <cstdint>
#include <string>

namespace vdev {

// Reads the whole file into *out; false with "<what> <path>: <reason>" in *error.
bool read_file(const std::string& path, const char* what, std::string* out, std::string* error);

// s as a JSON string literal (quotes, backslash and control characters escaped).
std::string json_string(const std::string& s);

// The TLS library this program is built on, as its banner names it ("Mbed TLS 3.6.6"); the summaries carry it
// as "tls_library" so that a cell records the device's stack from the device itself.
std::string tls_library();

// The CPU this program runs on, as /proc/cpuinfo's first "model name" says ("" when it says none): the summaries
// carry it as "cpu_model", the label of the device's own handshake phase times (a virtual device's are the host's).
std::string cpu_model();

// The TLS 1.3 record padding granularity this program's mbedTLS was built with
// (MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY, as its own headers and user config set it), or -1 when the
// library speaks no TLS 1.3 (2.28). The summaries carry it as "tls13_padding_granularity" (null for -1).
int tls13_padding_granularity();
std::string tls13_padding_granularity_json();  // the same as JSON: a number, or null

// A decimal unsigned integer <= max, nothing else (no sign, no spaces, no suffix).
bool parse_uint(const char* text, uint64_t max, uint64_t* out);

}  // namespace vdev
