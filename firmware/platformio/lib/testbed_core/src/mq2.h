// MQ-2 gas sensor arithmetic shared by the ESP32 firmware and the simulated sensor.
// Rs from a voltage divider reading; ppm from the datasheet's LPG curve, log-log fit
// through (200 ppm, Rs/R0 = 1.70) and (10000 ppm, Rs/R0 = 0.27), read off the datasheet plot:
// indicative values, not a calibrated instrument.
#pragma once

#include <cstdint>

namespace tb {

struct Mq2Params {
  double load_ohm = 10000.0;     // RL on the module (often 1k..10k; measure yours)
  double supply_v = 5.0;         // heater/divider supply
  double adc_ref_v = 3.3;        // full-scale voltage at the ADC pin (after any divider)
  double divider_ratio = 1.0;    // V_sensor_out / V_adc_pin (e.g. 1.5 with a 10k/20k divider)
  uint16_t adc_max = 4095;
  double clean_air_ratio = 9.83; // Rs/R0 in clean air (datasheet)
};

// Sensor resistance in ohm for a raw ADC reading; returns a negative value for a 0 reading.
double mq2_rs_ohm(uint16_t adc, const Mq2Params& p);

// R0 from a mean clean-air Rs.
double mq2_r0_from_clean_air(double rs_clean_ohm, const Mq2Params& p);

// LPG-equivalent ppm from Rs/R0, clamped to 0..9999.
uint16_t mq2_ppm(double rs_ohm, double r0_ohm);

// Raw ADC reading that corresponds to a given Rs (inverse of mq2_rs_ohm; for the simulation).
uint16_t mq2_adc_for_rs(double rs_ohm, const Mq2Params& p);

}  // namespace tb
