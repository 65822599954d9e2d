// What a host emulates of a board's sleep (emulated_sleep.h).
#include "emulated_sleep.h"

tb::Err EmulatedSleep::sleep(tb::SleepMode mode, int64_t due_mono_us) {
  (void)due_mono_us;  // the publisher waits out the time itself
  int kept = 0;
  tb::Err e = tb::emulate_sleep(t_, mode, &rtc_, &kept);
  ++sleeps_;
  kept_ += static_cast<uint32_t>(kept);
  return e;
}

namespace {

const char* kPowerSaveNote =
    "power save modem-sleep: NOT emulated (a host's network interface has no power save: the wire's timing is the "
    "radio-on one)";
const char* kLightNote =
    "light sleep: NOT emulated beyond the schedule (the host's CPU and network stay up; each connection closes as "
    "its mode says and the next opens when due)";
const char* kDeepNote =
    "deep sleep: EMULATED as a wake: the socket closed, the TLS client's state forgotten but for the session kept "
    "in (emulated) RTC memory, which the next connection resumes; the radio's association and DHCP are NOT (a "
    "host keeps its link)";

}  // namespace

std::string sleep_emulation_note(tb::PowerSave p, tb::SleepMode s) {
  std::string out;
  if (p == tb::PowerSave::ModemSleep) out += std::string(kPowerSaveNote) + "\n";
  if (s == tb::SleepMode::Light) out += std::string(kLightNote) + "\n";
  if (s == tb::SleepMode::Deep) out += std::string(kDeepNote) + "\n";
  return out;
}

std::string sleep_summary_json(tb::PowerSave p, tb::SleepMode s, const EmulatedSleep& e) {
  const bool deep = s == tb::SleepMode::Deep;
  return std::string("{\"power_save\":\"") + tb::power_save_name(p) + "\",\"power_save_emulated\":false" +
         ",\"sleep_mode\":\"" + tb::sleep_mode_name(s) + "\",\"sleep_emulated\":" +
         (deep ? "\"wake: TLS state forgotten but the RTC-kept session\"" : s == tb::SleepMode::Light ? "false" : "null") +
         ",\"sleeps\":" + std::to_string(e.sleeps()) + ",\"sessions_kept\":" + std::to_string(e.kept()) + "}";
}
