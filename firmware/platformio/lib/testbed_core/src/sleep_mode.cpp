// Power save and sleep mode names, and the deep sleep's kept TLS session (sleep_mode.h).
#include "sleep_mode.h"

#include <cstring>

namespace tb {

const char* power_save_name(PowerSave p) { return p == PowerSave::ModemSleep ? "modem-sleep" : "none"; }

const char* sleep_mode_name(SleepMode s) {
  switch (s) {
    case SleepMode::Light: return "light";
    case SleepMode::Deep: return "deep";
    default: return "stay";
  }
}

bool parse_power_save(const char* name, PowerSave* out) {
  if (name == nullptr) return false;
  if (strcmp(name, "none") == 0) {
    *out = PowerSave::None;
  } else if (strcmp(name, "modem-sleep") == 0) {
    *out = PowerSave::ModemSleep;
  } else {
    return false;
  }
  return true;
}

bool parse_sleep_mode(const char* name, SleepMode* out) {
  if (name == nullptr) return false;
  if (strcmp(name, "stay") == 0) {
    *out = SleepMode::Stay;
  } else if (strcmp(name, "light") == 0) {
    *out = SleepMode::Light;
  } else if (strcmp(name, "deep") == 0) {
    *out = SleepMode::Deep;
  } else {
    return false;
  }
  return true;
}

uint32_t kept_checksum(const uint8_t* data, size_t len) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < len; ++i) h = (h ^ data[i]) * 16777619u;
  return h;
}

void KeptSession::clear() {
  magic = 0;
  length = 0;
  check = 0;
}

bool KeptSession::store(const uint8_t* data, size_t len) {
  clear();
  if (data == nullptr || len == 0 || len > kCapacity) return false;
  memcpy(bytes, data, len);
  return seal(len);
}

bool KeptSession::seal(size_t len) {
  clear();
  if (len == 0 || len > kCapacity) return false;
  length = static_cast<uint32_t>(len);
  check = kept_checksum(bytes, len);
  magic = kMagic;
  return true;
}

bool KeptSession::valid() const {
  return magic == kMagic && length > 0 && length <= kCapacity && check == kept_checksum(bytes, length);
}

}  // namespace tb
