// The sleep between connections as vdevice and board-emu emulate it (sleep_mode.h, publisher.h
// emulate_sleep), and what they say of it: a host cannot drop its radio's power or its CPU's, so the power save
// and a light sleep change nothing here but the schedule; a deep sleep is emulated as a wake: the transport's
// state forgotten but for the TLS session kept in (emulated) RTC memory, which the next connection resumes.
#pragma once

#include <cstdint>
#include <string>

#include "publisher.h"

class EmulatedSleep : public tb::BetweenConnections {
 public:
  explicit EmulatedSleep(tb::Transport& t) : t_(t) { rtc_.clear(); }
  tb::Err sleep(tb::SleepMode mode, int64_t due_mono_us) override;
  uint32_t sleeps() const { return sleeps_; }
  uint32_t kept() const { return kept_; }

 private:
  tb::Transport& t_;
  tb::KeptSession rtc_;  // the bytes an ESP32's RTC memory would hold across the deep sleep
  uint32_t sleeps_ = 0;
  uint32_t kept_ = 0;
};

// One line per option a host does not emulate as a board would do it ("" when both are the defaults).
std::string sleep_emulation_note(tb::PowerSave p, tb::SleepMode s);
// The summary's "sleep" object: the modes, what was emulated, the sleeps and the sessions kept across them.
std::string sleep_summary_json(tb::PowerSave p, tb::SleepMode s, const EmulatedSleep& e);
