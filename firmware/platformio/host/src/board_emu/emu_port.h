// board-emu's BoardPort: heap and RSSI are constants (labelled "emulated" in the BANNER), jitter before each
// send, and the sleep between connections as a host can emulate it, said on stderr once per RUN
// (emulated_sleep.h: a deep sleep's forgetting and its RTC-kept session; not the radio's power save).
#pragma once

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include "emulated_sleep.h"
#include "testbed_core.h"

class EmuPort : public tb::BoardPort {
 public:
  EmuPort(uint32_t jitter_us, uint64_t seed) : jitter_us_(jitter_us), rng_(seed ^ 0x9E3779B97F4A7C15ULL) {}
  uint32_t free_heap() override { return 180000; }
  uint32_t min_free_heap() override { return 170000; }
  int rssi() override { return -55; }
  void before_send() override {
    if (jitter_us_ == 0) return;
    uint32_t us = std::uniform_int_distribution<uint32_t>(0, jitter_us_)(rng_);
    timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000L};
    nanosleep(&ts, nullptr);
  }
  void power_save(tb::PowerSave p) override {
    said_ = false;  // a new RUN
    power_save_ = p;
    say(tb::SleepMode::Stay);
  }
  tb::Err sleep_between(tb::SleepMode mode, int64_t due_mono_us, tb::Transport& t, tb::KeptSession* rtc,
                        int* kept) override {
    if (!said_) say(mode);
    return tb::BoardPort::sleep_between(mode, due_mono_us, t, rtc, kept);
  }

 private:
  void say(tb::SleepMode mode) {
    const std::string note = sleep_emulation_note(mode == tb::SleepMode::Stay ? power_save_ : tb::PowerSave::None, mode);
    if (!note.empty()) fprintf(stderr, "board-emu: %s", note.c_str());
    said_ = mode != tb::SleepMode::Stay;
  }

  uint32_t jitter_us_;
  std::mt19937_64 rng_;
  tb::PowerSave power_save_ = tb::PowerSave::None;
  bool said_ = false;
};
