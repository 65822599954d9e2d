// ESP32 publisher of the MQTT TLS testbed: WiFi station, SNTP, flame + MQ-2 sensors, and the
// portable core's serial control protocol (lib/testbed_core/src/board_session.h): one flash, one boot,
// then RUN after RUN from the host (a whole sweep). Board code only; all protocol code is in the core.
// Serial lines (115200 Bd), see README.md "Serial control protocol":
//   BANNER / WIFI / SNTP / MQ2 / READY, then per RUN: ACK / CLOCK / SYNC / KEYLOG / HANDSHAKE / MSG / DONE|ERROR / READY
#include <Arduino.h>
#include <WiFi.h>
#include <WiFiUdp.h>
#include <esp_arduino_version.h>
#include <esp_attr.h>
#include <esp_heap_caps.h>
#include <esp_idf_version.h>
#include <esp_sleep.h>
#include <esp_sntp.h>
#include <esp_system.h>
#include <esp_wifi.h>
#if ESP_IDF_VERSION_MAJOR >= 5
#include <esp_mac.h>  // esp_read_mac moved out of esp_system.h in ESP-IDF 5 (Arduino-ESP32 3.x)
#endif
#include <esp_timer.h>
#include <sys/time.h>
#include <time.h>

#include <cinttypes>
#include <cstdio>

#include "board_pins.h"
#include "board_session.h"
#include "testbed_core.h"
#include "wifi_udp_datagram.h"  // the clock exchanges over WiFiUDP (resolves once, flushes, spins for t4)
#if defined(TESTBED_WIFICLIENTSECURE)
#include "arduino_client_adapter.h"  // env esp32dev-wificlientsecure: TLS RUNs through WiFiClientSecure
#endif
#include "testbed_generated.h"  // written by `testbed firmware build` (device id, topic; the cell comes with RUN)

#if !defined(TESTBED_WIFI_SSID) || !defined(TESTBED_WIFI_PASSWORD) || !defined(TESTBED_BROKER_HOST)
#error "build through platformio.ini: TESTBED_WIFI_SSID / TESTBED_WIFI_PASSWORD / TESTBED_BROKER_HOST flags missing"
#endif
static_assert(sizeof(TESTBED_WIFI_SSID) > 1, "TESTBED_WIFI_SSID is empty: export it before `pio run`");
static_assert(sizeof(TESTBED_BROKER_HOST) > 1, "TESTBED_BROKER_HOST is empty: export it before `pio run`");
// The BANNER's board=: the PlatformIO env, so a cell's record says which stack published (platformio.ini).
#if defined(TESTBED_WIFICLIENTSECURE)
#define TESTBED_BOARD_ENV "esp32dev-wificlientsecure"
#elif defined(TESTBED_CHACHA_TLS13)
#define TESTBED_BOARD_ENV "esp32dev-idf5-tls13"
#elif defined(TESTBED_CHACHA_ONLY)
#define TESTBED_BOARD_ENV "esp32dev-chacha-only"
#elif ESP_ARDUINO_VERSION_MAJOR >= 3
#define TESTBED_BOARD_ENV "esp32dev-arduino3"
#else
#define TESTBED_BOARD_ENV "esp32dev"
#endif
#ifndef TESTBED_FW_BUILD
#define TESTBED_FW_BUILD __DATE__ "-" __TIME__  // the BANNER's fw=; spaces become '_'
#endif

namespace {

constexpr uint32_t kWifiTimeoutMs = 30000;
constexpr uint32_t kSntpTimeoutMs = 30000;
constexpr size_t kSerialRxBuffer = 256;  // Arduino's default; the BANNER tells the host
// A sleep between connections ends this long before the next connection is due: the wake's Wi-Fi association and
// DHCP (the publisher waits out what is left, so a short one costs nothing but this margin's awake time).
constexpr int64_t kWakeMarginUs = 2000000;

// A deep sleep's kept TLS session (sleep_mode.h KeptSession): RTC slow memory, the only RAM a deep sleep keeps.
RTC_DATA_ATTR tb::KeptSession g_rtc_session;

class EspClock : public tb::Clock {
 public:
  int64_t mono_us() override { return esp_timer_get_time(); }
  int64_t wall_us() override {
    timeval tv;
    gettimeofday(&tv, nullptr);
    return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec;
  }
  void sleep_until_mono_us(int64_t t) override {
    int64_t left = t - mono_us();
    if (left > 2000) delay(static_cast<uint32_t>((left - 1000) / 1000));  // yields to FreeRTOS
    while (mono_us() < t) {
    }
  }
};

class BoardSensors : public tb::SensorSource {
 public:
  void begin() {
    pinMode(TESTBED_PIN_FLAME_DO, INPUT);
    analogReadResolution(12);
    analogSetPinAttenuation(TESTBED_PIN_FLAME_AO, ADC_11db);
    analogSetPinAttenuation(TESTBED_PIN_MQ2_AO, ADC_11db);
    params_.load_ohm = TESTBED_MQ2_LOAD_OHM;
    params_.divider_ratio = TESTBED_MQ2_DIVIDER_RATIO;
  }

  // Heater warm-up, then R0 = mean clean-air Rs / 9.83 (datasheet clean-air ratio).
  bool calibrate() {
    Serial.printf("MQ2 warm-up %d s\n", TESTBED_MQ2_WARMUP_S);
    delay(static_cast<uint32_t>(TESTBED_MQ2_WARMUP_S) * 1000);
    double sum = 0;
    int n = 0;
    for (int i = 0; i < TESTBED_MQ2_CAL_SAMPLES; ++i) {
      double rs = tb::mq2_rs_ohm(static_cast<uint16_t>(analogRead(TESTBED_PIN_MQ2_AO)), params_);
      if (rs > 0) {
        sum += rs;
        ++n;
      }
      delay(100);
    }
    if (n == 0) {
      Serial.println("MQ2 error=reads_0 (check the wiring and the divider; ppm values are meaningless)");
      return false;
    }
    r0_ = tb::mq2_r0_from_clean_air(sum / n, params_);
    Serial.printf("MQ2 R0=%.0f ohm from %d clean-air samples\n", r0_, n);
    return true;
  }

  tb::Err read(uint32_t, tb::SensorReading* out) override {
    out->flame_digital = digitalRead(TESTBED_PIN_FLAME_DO) == LOW ? 1 : 0;
    out->flame_analog = static_cast<uint16_t>(analogRead(TESTBED_PIN_FLAME_AO));
    out->mq2_analog = static_cast<uint16_t>(analogRead(TESTBED_PIN_MQ2_AO));
    out->mq2_ppm = tb::mq2_ppm(tb::mq2_rs_ohm(out->mq2_analog, params_), r0_);
    return tb::Err::Ok;
  }

 private:
  tb::Mq2Params params_;
  double r0_ = 1.0;
};

// Arduino Serial as the session's byte stream.
class SerialStream : public tb::ByteStream {
 public:
  tb::Err read(uint8_t* buf, size_t cap, size_t* got, uint32_t timeout_ms) override {
    *got = 0;
    uint32_t start = millis();
    while (Serial.available() <= 0) {
      if (millis() - start >= timeout_ms) return tb::Err::RecvTimeout;
      delay(1);
    }
    while (*got < cap && Serial.available() > 0) buf[(*got)++] = static_cast<uint8_t>(Serial.read());
    return tb::Err::Ok;
  }
  tb::Err write(const uint8_t* data, size_t len) override {
    Serial.write(data, len);
    return tb::Err::Ok;
  }
};

bool connect_wifi();

// The radio's power save per RUN, and the sleep between connections (docs/energy.md "A board that sleeps").
// ESP-IDF powers the radio down in a light or a deep sleep (Wi-Fi is stopped first, and the association is lost);
// each wake associates and asks DHCP again. light: RAM kept, so the TLS session too. deep: the transport forgets
// everything (power_off) but the session kept in RTC memory (g_rtc_session), from which the next connection resumes.
// The CPU then light-sleeps too: esp_deep_sleep_start would reset the chip, which ends the serial session that a
// whole sweep runs in (one boot, RUN after RUN); the radio and the TLS client go through exactly a deep wake.
class EspPort : public tb::BoardPort {
 public:
  uint32_t free_heap() override { return esp_get_free_heap_size(); }
  uint32_t min_free_heap() override { return esp_get_minimum_free_heap_size(); }
  int rssi() override { return static_cast<int>(WiFi.RSSI()); }
#if defined(TESTBED_MARKER_PIN)
  // The power trace's marker (`testbed firmware build --marker-pin N`; off by default): the pin high for 1 ms from
  // each connection's start and each PUBLISH, dropped by a one-shot timer so that nothing waits for it.
  void begin_marker() {
    pinMode(TESTBED_MARKER_PIN, OUTPUT);
    digitalWrite(TESTBED_MARKER_PIN, LOW);
    esp_timer_create_args_t args = {};
    args.callback = [](void*) { digitalWrite(TESTBED_MARKER_PIN, LOW); };
    args.name = "marker";
    esp_timer_create(&args, &marker_timer_);
  }
  void mark() override {
    digitalWrite(TESTBED_MARKER_PIN, HIGH);
    esp_timer_stop(marker_timer_);  // a mark within 1 ms of the last: its own 1 ms
    esp_timer_start_once(marker_timer_, 1000);
  }
#else
  void begin_marker() {}
#endif
  void power_save(tb::PowerSave p) override {
    ps_ = p == tb::PowerSave::ModemSleep ? WIFI_PS_MIN_MODEM : WIFI_PS_NONE;
    esp_wifi_set_ps(ps_);
  }
  tb::Err sleep_between(tb::SleepMode mode, int64_t due_mono_us, tb::Transport& t, tb::KeptSession* rtc,
                        int* kept) override {
    (void)rtc;  // the session's own RTC memory is g_rtc_session
    *kept = 0;
    if (mode == tb::SleepMode::Stay) return tb::Err::Ok;
    if (mode == tb::SleepMode::Deep) {
      tb::Err e = t.keep_session(&g_rtc_session);
      if (e != tb::Err::Ok) return e;
      t.power_off();
      *kept = g_rtc_session.valid() ? 1 : 0;
    }
    Serial.flush();
    WiFi.mode(WIFI_OFF);
    const int64_t left = due_mono_us - esp_timer_get_time() - kWakeMarginUs;
    if (left > 0) {
      esp_sleep_enable_timer_wakeup(static_cast<uint64_t>(left));
      esp_light_sleep_start();
    }
    WiFi.mode(WIFI_STA);
    esp_wifi_set_ps(ps_);
    if (!connect_wifi()) return tb::Err::Connect;
    return mode == tb::SleepMode::Deep ? t.restore_session(g_rtc_session) : tb::Err::Ok;
  }

 private:
  wifi_ps_type_t ps_ = WIFI_PS_NONE;
#if defined(TESTBED_MARKER_PIN)
  esp_timer_handle_t marker_timer_ = nullptr;
#endif
};

bool connect_wifi() {
  WiFi.begin(TESTBED_WIFI_SSID, TESTBED_WIFI_PASSWORD);
  uint32_t start = millis();
  while (WiFi.status() != WL_CONNECTED) {
    if (millis() - start > kWifiTimeoutMs) {
      Serial.println("WIFI error=timeout (not connected within 30 s; SSID/password from TESTBED_WIFI_*)");
      return false;
    }
    delay(100);
  }
  Serial.printf("WIFI ip=%s rssi=%d channel=%d\n", WiFi.localIP().toString().c_str(), static_cast<int>(WiFi.RSSI()),
                static_cast<int>(WiFi.channel()));
  return true;
}

void sync_time() {
  const char* server = sizeof(TESTBED_SNTP_SERVER) > 1 ? TESTBED_SNTP_SERVER : TESTBED_BROKER_HOST;
  configTime(0, 0, server);
  uint32_t start = millis();
  while (time(nullptr) < 1600000000) {
    if (millis() - start > kSntpTimeoutMs) {
      Serial.printf("SNTP error=timeout server=%s (no time within 30 s; t_send_us is not UTC)\n", server);
      return;
    }
    delay(100);
  }
  Serial.printf("SNTP server=%s synced_after_ms=%lu\n", server, static_cast<unsigned long>(millis() - start));
  // No SNTP slews from here on: each cell's clock exchanges (before and after) assume a constant drift.
#if ESP_IDF_VERSION_MAJOR >= 5
  esp_sntp_stop();  // ESP-IDF 5 deprecates the lwIP-named sntp_* API
#else
  sntp_stop();
#endif
}

// The BANNER's facts (static storage: the session keeps the pointers).
const tb::BoardInfo& board_info() {
  static char chip[48], mac[20], arduino[16];
  static tb::BoardInfo info;
  snprintf(chip, sizeof(chip), "%s-rev%u", ESP.getChipModel(), static_cast<unsigned>(ESP.getChipRevision()));
  uint8_t m[6] = {0};
  esp_read_mac(m, ESP_MAC_WIFI_STA);
  snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  snprintf(arduino, sizeof(arduino), "%d.%d.%d", ESP_ARDUINO_VERSION_MAJOR, ESP_ARDUINO_VERSION_MINOR,
           ESP_ARDUINO_VERSION_PATCH);
  info.board = TESTBED_BOARD_ENV;
  info.chip = chip;
  info.mac = mac;
  info.fw = TESTBED_FW_BUILD;
  info.arduino = arduino;
  info.idf = esp_get_idf_version();
  info.cpu_mhz = getCpuFrequencyMhz();
  info.wifi_ps = WiFi.getSleep() ? "min_modem" : "none";
  // The ESP32's crypto accelerators do AES, SHA and bignum (RSA/ECC); ChaCha20-Poly1305 runs in software.
  info.hw_crypto = "aes,sha,mpi";
  info.sw_crypto = "chacha20,poly1305";
  info.rx_buf = kSerialRxBuffer;
  info.device_id = TESTBED_DEVICE_ID;
  info.topic = TESTBED_TOPIC;
  return info;
}

EspClock g_clock;
BoardSensors g_sensors;
SerialStream g_serial;
EspPort g_port;
WifiUdpDatagram g_udp;
tb::BoardSession* g_session = nullptr;

}  // namespace

void setup() {
  Serial.setRxBufferSize(kSerialRxBuffer);  // before begin()
  Serial.begin(115200);
  delay(200);
  g_sensors.begin();
  g_port.begin_marker();
  WiFi.mode(WIFI_STA);
  WiFi.setSleep(false);  // modem sleep adds tens of ms of latency
  static tb::BoardSession session(g_serial, g_clock, g_sensors, g_port, board_info(), &g_udp);  // ~20 KB: static
  g_session = &session;
#if defined(TESTBED_WIFICLIENTSECURE)
  static WifiClientSecureFilter secure_client(g_clock);
  session.set_transport_filter(&secure_client);
#endif
  session.banner();
  connect_wifi();
  sync_time();
  g_sensors.calibrate();
  session.ready();
}

void loop() { g_session->poll(100); }  // RUN after RUN until the board is reset or unplugged
