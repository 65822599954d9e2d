// The ONE place the sensor wiring is defined (see README.md, "Wiring").
// Analog inputs must be ADC1 pins (GPIO 32-39): ADC2 cannot be read while WiFi is on.
#pragma once

// Flame sensor module (IR receiver + LM393): DO = digital (LOW when a flame is seen), AO = analog.
#define TESTBED_PIN_FLAME_DO 27  // any input GPIO
#define TESTBED_PIN_FLAME_AO 34  // ADC1_CH6, input only
// MQ-2 gas sensor module: AO through a 10k/20k divider (5 V module output -> <= 3.3 V at the pin).
#define TESTBED_PIN_MQ2_AO 35    // ADC1_CH7, input only
#define TESTBED_MQ2_DIVIDER_RATIO 1.5  // V_module / V_pin with the 10k (top) / 20k (bottom) divider
#define TESTBED_MQ2_LOAD_OHM 10000.0   // RL on the module (check yours: often 1k or 10k)
#define TESTBED_MQ2_WARMUP_S 60        // heater warm-up before the clean-air R0 calibration
#define TESTBED_MQ2_CAL_SAMPLES 50
