#include "host_util.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mbedtls/ssl.h"
#include "mbedtls/version.h"

namespace vdev {

std::string tls_library() {
  char version[32];  // the API needs at least 18 bytes
  mbedtls_version_get_string_full(version);
  return version;
}

std::string cpu_model() {
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "";
  char line[256];
  std::string model;
  while (model.empty() && fgets(line, sizeof(line), f) != nullptr) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char* colon = strchr(line, ':');
    if (colon == nullptr) continue;
    model = colon + 1;
    while (!model.empty() && (model.front() == ' ' || model.front() == '\t')) model.erase(0, 1);
    while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
  }
  fclose(f);
  return model;
}

int tls13_padding_granularity() {
#if MBEDTLS_VERSION_MAJOR >= 3 && defined(MBEDTLS_SSL_PROTO_TLS1_3)
  return MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY;
#else
  return -1;
#endif
}

std::string tls13_padding_granularity_json() {
  int g = tls13_padding_granularity();
  return g < 0 ? "null" : std::to_string(g);
}

bool read_file(const std::string& path, const char* what, std::string* out, std::string* error) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = std::string(what) + " " + path + ": " + strerror(errno);
    return false;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
  bool bad = ferror(f) != 0;
  fclose(f);
  if (bad) {
    *error = std::string(what) + " " + path + ": read error";
    return false;
  }
  return true;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

bool parse_uint(const char* text, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-' || *text == '+') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

}  // namespace vdev
