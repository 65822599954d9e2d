#include "mq2.h"

#include <cmath>

namespace tb {
namespace {
// log10(Rs/R0) = kSlope * log10(ppm) + kIntercept
const double kSlope = (std::log10(0.27) - std::log10(1.70)) / (std::log10(10000.0) - std::log10(200.0));
const double kIntercept = std::log10(1.70) - kSlope * std::log10(200.0);
}  // namespace

double mq2_rs_ohm(uint16_t adc, const Mq2Params& p) {
  if (adc == 0) return -1.0;
  double v_out = (static_cast<double>(adc) / p.adc_max) * p.adc_ref_v * p.divider_ratio;
  if (v_out >= p.supply_v) return 0.0;
  return p.load_ohm * (p.supply_v - v_out) / v_out;
}

double mq2_r0_from_clean_air(double rs_clean_ohm, const Mq2Params& p) { return rs_clean_ohm / p.clean_air_ratio; }

uint16_t mq2_ppm(double rs_ohm, double r0_ohm) {
  if (rs_ohm <= 0.0 || r0_ohm <= 0.0) return 9999;
  double ratio = rs_ohm / r0_ohm;
  double ppm = std::pow(10.0, (std::log10(ratio) - kIntercept) / kSlope);
  if (!(ppm >= 0.0)) return 0;
  if (ppm > 9999.0) return 9999;
  return static_cast<uint16_t>(ppm + 0.5);
}

uint16_t mq2_adc_for_rs(double rs_ohm, const Mq2Params& p) {
  double v_out = p.supply_v * p.load_ohm / (p.load_ohm + rs_ohm);
  double adc = v_out / (p.adc_ref_v * p.divider_ratio) * p.adc_max;
  if (adc < 0.0) return 0;
  if (adc > p.adc_max) return p.adc_max;
  return static_cast<uint16_t>(adc + 0.5);
}

}  // namespace tb
