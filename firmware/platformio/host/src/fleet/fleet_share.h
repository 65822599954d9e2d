// A fleet's shares: the part of a fleet one publisher host runs (not its worker processes: those are the
// shards of fleet_shard.h). The fleet's devices 0..N-1 are dealt to the shares by weight, interleaved: smooth
// weighted round-robin (each step every share's credit grows by its weight, the share with the most credit,
// the lowest index on a tie, takes the device and gives back the weights' total), so equal weights deal
// i % K as the fleet deals devices to its worker processes, and every stretch of the fleet is spread over the
// shares by weight. The dealing repeats every sum(weights) / gcd(weights) devices (the credits are back to 0).
// orchestrator/model/shares.py is the same dealing in Python (tests/firmware/test_fleet_shares.py holds the two
// equal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fleet {

constexpr uint32_t kMaxShares = 256;         // --share-weights lists at most this many weights
constexpr uint32_t kMaxShareWeight = 100;    // each a whole number 1..this

// "W0,W1,...": 1..kMaxShares whole numbers 1..kMaxShareWeight; false with the error.
bool parse_share_weights(const std::string& text, std::vector<uint32_t>* weights, std::string* error);

// One period of the dealing: period[j] = the share of every device i with i % period.size() == j.
std::vector<uint32_t> share_period(const std::vector<uint32_t>& weights);

// The global indices (ascending) of the devices of share k in a fleet of `devices`.
std::vector<uint32_t> share_devices(uint32_t devices, const std::vector<uint32_t>& weights, uint32_t k);

// "1,2,3" (the weights as given, normalised).
std::string weights_text(const std::vector<uint32_t>& weights);

}  // namespace fleet
