// What a device does with its radio and between its connections (issue 42, part 2): the radio's power save
// while connected, and the sleep between two connections of a run that is not persistent. What a deep sleep
// keeps is a KeptSession: the TLS session of the last handshake, serialized into a fixed buffer the ESP32
// places in RTC memory (RTC_DATA_ATTR: the only RAM a deep sleep keeps), so that the next wake can resume it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tb_error.h"

namespace tb {

enum class PowerSave : uint8_t {
  None,        // the radio always on (WiFi.setSleep(false), WIFI_PS_NONE)
  ModemSleep,  // the radio off between the access point's beacons (WIFI_PS_MIN_MODEM)
};

enum class SleepMode : uint8_t {
  Stay,   // awake and associated between connections (the board as before)
  Light,  // light sleep between connections: the CPU paused, RAM kept, woken by a timer
  Deep,   // deep sleep: everything but RTC memory lost; the TLS session kept there (KeptSession)
};

// "none", "modem-sleep"; "stay", "light", "deep"
const char* power_save_name(PowerSave p);
const char* sleep_mode_name(SleepMode s);
// false for anything but the names above (exact, lower case)
bool parse_power_save(const char* name, PowerSave* out);
bool parse_sleep_mode(const char* name, SleepMode* out);

// A TLS session as mbedtls_ssl_session_save writes it (its master secret, ID or ticket, the peer's
// certificate), with a length and a checksum so that a wake finds out whether RTC memory still holds one
// (a power-on or a brown-out leaves it undefined). A plain POD: copied byte for byte, it is the same session.
struct KeptSession {
  static constexpr uint32_t kMagic = 0x54424b53;  // "TBKS"
  static constexpr size_t kCapacity = 2048;       // of the ESP32's 8 KB of RTC slow memory
  uint32_t magic;
  uint32_t length;
  uint32_t check;
  uint8_t bytes[kCapacity];

  void clear();
  // stores `len` bytes (false, and cleared, when they do not fit)
  bool store(const uint8_t* data, size_t len);
  // the first `len` bytes of `bytes` (written there in place, e.g. by mbedtls_ssl_session_save) are the session
  bool seal(size_t len);
  // magic, length and checksum agree: it holds a session
  bool valid() const;
};

// FNV-1a over the bytes (not a MAC: RTC memory is the device's own; it tells a kept session from garbage)
uint32_t kept_checksum(const uint8_t* data, size_t len);

}  // namespace tb
