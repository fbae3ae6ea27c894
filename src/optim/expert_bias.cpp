#include "optim/expert_bias.h"

#include <algorithm>

namespace moet {

void update_expert_bias(const std::vector<MoeLayer*>& layers, double gamma) {
  for (MoeLayer* layer : layers) {
    const std::vector<int64_t>& load = layer->stats().load_E;
    double mean = 0;
    for (int64_t l : load) mean += double(l);
    mean /= double(load.size());
    float* b = layer->correction_bias()->value.f32();
    for (size_t e = 0; e < load.size(); ++e) {
      double diff = mean - double(load[e]);
      double sign = diff > 0 ? 1.0 : (diff < 0 ? -1.0 : 0.0);
      b[e] = float(double(b[e]) + gamma * sign);
    }
  }
}

double max_expert_load_ratio(const std::vector<MoeLayer*>& layers) {
  double worst = 0;
  for (MoeLayer* layer : layers) {
    const std::vector<int64_t>& load = layer->stats().load_E;
    double mean = 0, mx = 0;
    for (int64_t l : load) {
      mean += double(l);
      mx = std::max(mx, double(l));
    }
    mean /= double(load.size());
    if (mean > 0) worst = std::max(worst, mx / mean);
  }
  return worst;
}

void reset_router_stats(const std::vector<MoeLayer*>& layers) {
  for (MoeLayer* layer : layers) {
    RouterStats& s = layer->stats();
    std::fill(s.load_E.begin(), s.load_E.end(), 0);
    s.balance_loss = 0;
    s.z_loss = 0;
    s.forwards = 0;
  }
}

}  // namespace moet
