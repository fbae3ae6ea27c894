// Auxiliary-loss-free load balancing (DeepSeek-V3): after each optimizer step,
// b_e += γ · sign(mean_load − load_e) per MoE layer, then the step's loads are reset.
#pragma once
#include <vector>

#include "model/moe_layer.h"

namespace moet {

// Updates every layer's e_score_correction_bias from its RouterStats::load_E.
void update_expert_bias(const std::vector<MoeLayer*>& layers, double gamma);

// max(load)/mean(load) of the worst layer (1.0 = perfectly balanced; 0 when no MoE layer).
double max_expert_load_ratio(const std::vector<MoeLayer*>& layers);

// Clears loads and loss sums for the next step.
void reset_router_stats(const std::vector<MoeLayer*>& layers);

}  // namespace moet
