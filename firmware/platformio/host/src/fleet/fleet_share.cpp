#include "fleet_share.h"

#include <numeric>

#include "host_util.h"

namespace fleet {

bool parse_share_weights(const std::string& text, std::vector<uint32_t>* weights, std::string* error) {
  weights->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    uint64_t w = 0;
    const bool digits = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || !vdev::parse_uint(item.c_str(), kMaxShareWeight, &w) || w == 0 || weights->size() == kMaxShares) {
      *error = "--share-weights: expected 1.." + std::to_string(kMaxShares) + " comma-separated whole numbers 1.." +
               std::to_string(kMaxShareWeight) + " (one per publisher host), got \"" + text + "\"";
      return false;
    }
    weights->push_back(static_cast<uint32_t>(w));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

std::vector<uint32_t> share_period(const std::vector<uint32_t>& weights) {
  uint64_t g = 0, total = 0;
  for (uint32_t w : weights) g = std::gcd(g, static_cast<uint64_t>(w));
  for (uint32_t w : weights) total += w / g;
  std::vector<int64_t> credit(weights.size(), 0);
  std::vector<uint32_t> period;
  period.reserve(total);
  for (uint64_t step = 0; step < total; ++step) {
    size_t best = 0;
    for (size_t k = 0; k < weights.size(); ++k) {
      credit[k] += weights[k] / g;
      if (credit[k] > credit[best]) best = k;
    }
    credit[best] -= static_cast<int64_t>(total);
    period.push_back(static_cast<uint32_t>(best));
  }
  return period;
}

std::vector<uint32_t> share_devices(uint32_t devices, const std::vector<uint32_t>& weights, uint32_t k) {
  const std::vector<uint32_t> period = share_period(weights);
  std::vector<uint32_t> mine;
  for (uint32_t i = 0; i < devices; ++i) {
    if (period[i % period.size()] == k) mine.push_back(i);
  }
  return mine;
}

std::string weights_text(const std::vector<uint32_t>& weights) {
  std::string out;
  for (uint32_t w : weights) out += (out.empty() ? "" : ",") + std::to_string(w);
  return out;
}

}  // namespace fleet
