#include "sim_sensors.h"

#include <cmath>

namespace vdev {

SimulatedSensors::SimulatedSensors(uint64_t seed) : state_(seed ^ 0x9E3779B97F4A7C15ULL) {
  // Calibrated as the firmware does: R0 from clean-air Rs (here a nominal 2-Mohm-class module reading).
  double rs_clean = tb::mq2_rs_ohm(tb::mq2_adc_for_rs(98300.0, mq2_), mq2_);
  r0_ = tb::mq2_r0_from_clean_air(rs_clean, mq2_);
}

uint64_t SimulatedSensors::next() {  // splitmix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double SimulatedSensors::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

tb::Err SimulatedSensors::read(uint32_t seq, tb::SensorReading* out) {
  (void)seq;
  // Gas: a bounded random walk of 0..600 ppm above clean air with rare puffs.
  gas_ppm_ += (uniform() - 0.5) * 20.0;
  if (uniform() < 0.01) gas_ppm_ += 300.0 * uniform();
  if (gas_ppm_ < 0.0) gas_ppm_ = 0.0;
  if (gas_ppm_ > 600.0) gas_ppm_ = 600.0;
  double ppm = 200.0 + gas_ppm_;  // the datasheet curve starts at 200 ppm
  // Invert the curve used by tb::mq2_ppm to get Rs, then the ADC reading the divider would give.
  double ratio = 1.70 * std::pow(ppm / 200.0, std::log10(0.27 / 1.70) / std::log10(10000.0 / 200.0));
  uint16_t adc = tb::mq2_adc_for_rs(ratio * r0_, mq2_);
  if (adc > 4095) adc = 4095;
  out->mq2_analog = adc;
  out->mq2_ppm = tb::mq2_ppm(tb::mq2_rs_ohm(adc, mq2_), r0_);
  // Flame: IR receiver module reads high (~4000) without flame; a flame is rare and pulls it low.
  bool flame = uniform() < 0.005;
  double analog = flame ? 300.0 + 400.0 * uniform() : 3950.0 + 100.0 * (uniform() - 0.5);
  if (analog > 4095.0) analog = 4095.0;
  out->flame_analog = static_cast<uint16_t>(analog);
  out->flame_digital = flame ? 1 : 0;
  return tb::Err::Ok;
}

}  // namespace vdev
