// Seeded simulation of the study's flame sensor and MQ-2 gas sensor (labelled "simulated" in every output).
#pragma once

#include <cstdint>

#include "mq2.h"
#include "publisher.h"

namespace vdev {

class SimulatedSensors : public tb::SensorSource {
 public:
  explicit SimulatedSensors(uint64_t seed);
  tb::Err read(uint32_t seq, tb::SensorReading* out) override;

 private:
  uint64_t next();
  double uniform();  // [0, 1)

  uint64_t state_;
  tb::Mq2Params mq2_;
  double r0_;
  double gas_ppm_ = 0.0;  // LPG-equivalent concentration above clean air
};

}  // namespace vdev
