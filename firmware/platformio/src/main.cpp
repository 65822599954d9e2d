// ESP32 publisher of the MQTT TLS testbed: WiFi station, SNTP, flame + MQ-2 sensors, and the
// portable core's publish loop (lib/testbed_core). Board code only; all protocol code is in the core.
// Serial lines (115200 Bd) are meant for `testbed firmware monitor`:
//   BOOT / WIFI / SNTP / MQ2 / HANDSHAKE / MSG seq=... / KEYLOG CLIENT_RANDOM ... / DONE / ERROR ...
#include <Arduino.h>
#include <WiFi.h>
#include <esp_heap_caps.h>
#include <esp_timer.h>
#include <sys/time.h>
#include <time.h>

#include <cinttypes>

#include "board_pins.h"
#include "testbed_core.h"
#include "testbed_generated.h"  // written by `testbed firmware build` (scenario, CA, run parameters)

#if !defined(TESTBED_WIFI_SSID) || !defined(TESTBED_WIFI_PASSWORD) || !defined(TESTBED_BROKER_HOST)
#error "build through platformio.ini: TESTBED_WIFI_SSID / TESTBED_WIFI_PASSWORD / TESTBED_BROKER_HOST flags missing"
#endif
static_assert(sizeof(TESTBED_WIFI_SSID) > 1, "TESTBED_WIFI_SSID is empty: export it before `pio run`");
static_assert(sizeof(TESTBED_BROKER_HOST) > 1, "TESTBED_BROKER_HOST is empty: export it before `pio run`");
#if TESTBED_TRANSPORT_TLS && !defined(TESTBED_CA_PEM)
#error "TLS scenario without TESTBED_CA_PEM: regenerate include/testbed_generated.h with testbed firmware build"
#endif
#ifndef TESTBED_SERIAL_KEYLOG
#define TESTBED_SERIAL_KEYLOG 1  // a testbed: print TLS secrets so the capture can be decrypted
#endif

namespace {

constexpr uint32_t kWifiTimeoutMs = 30000;
constexpr uint32_t kSntpTimeoutMs = 30000;

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
      Serial.println("ERROR MQ2 reads 0: check wiring and the divider");
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

class SerialLog : public tb::SendObserver, public tb::KeylogSink {
 public:
  bool on_sent(uint32_t seq, int64_t t_send_us, size_t payload_bytes, size_t mqtt_bytes) override {
    Serial.printf("MSG seq=%" PRIu32 " t_send_us=%" PRId64 " bytes=%u mqtt=%u heap=%u rssi=%d\n", seq, t_send_us,
                  static_cast<unsigned>(payload_bytes), static_cast<unsigned>(mqtt_bytes),
                  static_cast<unsigned>(esp_get_free_heap_size()), static_cast<int>(WiFi.RSSI()));
    return true;
  }
  void write_line(const char* line) override { Serial.printf("KEYLOG %s\n", line); }
};

bool connect_wifi() {
  WiFi.mode(WIFI_STA);
  WiFi.setSleep(false);  // modem sleep adds tens of ms of latency
  WiFi.begin(TESTBED_WIFI_SSID, TESTBED_WIFI_PASSWORD);
  uint32_t start = millis();
  while (WiFi.status() != WL_CONNECTED) {
    if (millis() - start > kWifiTimeoutMs) {
      Serial.println("ERROR WiFi: not connected within 30 s (SSID/password from TESTBED_WIFI_*)");
      return false;
    }
    delay(100);
  }
  Serial.printf("WIFI ip=%s rssi=%d channel=%d\n", WiFi.localIP().toString().c_str(), static_cast<int>(WiFi.RSSI()),
                static_cast<int>(WiFi.channel()));
  return true;
}

bool sync_time() {
  const char* server = sizeof(TESTBED_SNTP_SERVER) > 1 ? TESTBED_SNTP_SERVER : TESTBED_BROKER_HOST;
  configTime(0, 0, server);
  uint32_t start = millis();
  while (time(nullptr) < 1600000000) {
    if (millis() - start > kSntpTimeoutMs) {
      Serial.printf("ERROR SNTP: no time from %s within 30 s (one-way delay will be unavailable)\n", server);
      return false;
    }
    delay(100);
  }
  Serial.printf("SNTP server=%s synced_after_ms=%lu\n", server, static_cast<unsigned long>(millis() - start));
  return true;
}

void run_once() {
  static EspClock clock;
  static BoardSensors sensors;
  static SerialLog log;
  sensors.begin();
  if (!connect_wifi()) return;
  sync_time();
  if (!sensors.calibrate()) return;

  tb::PublishConfig cfg;
  cfg.host = TESTBED_BROKER_HOST;
  cfg.port = TESTBED_BROKER_PORT;
  cfg.device_id = TESTBED_DEVICE_ID;
  cfg.topic = TESTBED_TOPIC;
  cfg.client_id = TESTBED_DEVICE_ID;
#ifdef TESTBED_MQTT_USERNAME
  cfg.username = TESTBED_MQTT_USERNAME;
#endif
#ifdef TESTBED_MQTT_PASSWORD
  cfg.password = TESTBED_MQTT_PASSWORD;
#endif
  cfg.qos = TESTBED_QOS;
  cfg.payload_size = TESTBED_PAYLOAD_BYTES;
  cfg.samples = TESTBED_SAMPLES;
  cfg.interval_us = static_cast<uint64_t>(TESTBED_INTERVAL_MS) * 1000;

#if TESTBED_TRANSPORT_TLS
  tb::TlsOptions tls;
  tls.ca_pem = TESTBED_CA_PEM;
#ifdef TESTBED_CLIENT_CERT_PEM
  tls.client_cert_pem = TESTBED_CLIENT_CERT_PEM;
  tls.client_key_pem = TESTBED_CLIENT_KEY_PEM;
#endif
  tls.server_name = TESTBED_SERVER_NAME;
  tls.ciphers = TESTBED_CIPHERS;
  tls.keylog = TESTBED_SERIAL_KEYLOG ? &log : nullptr;
  static tb::TlsTransport transport(clock, tls);
#else
  static tb::PlainTcp transport(clock);
#endif
  static tb::Publisher publisher(transport, clock, sensors, log);
  Serial.printf("BOOT scenario=%s transport=%s port=%d payload=%d samples=%d interval_ms=%d heap=%u\n",
                TESTBED_SCENARIO, TESTBED_TRANSPORT_TLS ? "tls" : "plain", TESTBED_BROKER_PORT, TESTBED_PAYLOAD_BYTES,
                TESTBED_SAMPLES, TESTBED_INTERVAL_MS, static_cast<unsigned>(esp_get_free_heap_size()));
  tb::RunStats stats;
  uint32_t heap_before = esp_get_free_heap_size();
  tb::Err e = publisher.run(cfg, &stats);
  const tb::TransportStats& ts = transport.stats();
  Serial.printf("HANDSHAKE tcp_ms=%.3f tls_ms=%.3f connack_ms=%.3f version=%s suite=%s min_heap=%u heap_before=%u\n",
                stats.tcp_connect_us / 1000.0, stats.handshake_us / 1000.0, stats.connack_us / 1000.0,
                ts.tls_version[0] ? ts.tls_version : "-", ts.cipher_suite[0] ? ts.cipher_suite : "-",
                static_cast<unsigned>(esp_get_minimum_free_heap_size()), static_cast<unsigned>(heap_before));
  if (e != tb::Err::Ok) {
    Serial.printf("ERROR %s: %s\n", tb::err_name(e), publisher.error_text());
    return;
  }
  Serial.printf("DONE sent=%" PRIu32 "\n", stats.messages_sent);
}

}  // namespace

void setup() {
  Serial.begin(115200);
  delay(200);
  Serial.println("BOOT testbed ESP32 publisher (flame + MQ-2, real sensors)");
  run_once();
}

void loop() { delay(1000); }  // one run per boot; press EN to run again
