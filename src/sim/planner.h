// The planner: every TP, PP, VPP, EP, micro-batch and recompute choice that divides the model
// and the cluster, simulated; those that do not fit in memory dropped; the rest ranked.
#pragma once
#include <string>
#include <vector>

#include "sim/step_model.h"

namespace moet::sim {

struct PlanRequest {
  int64_t gpus = 0, gbs = 0, seq = 4096;
  Recipe precision = Recipe::BF16;
  int64_t mtp = -1;  // -1: the model's own depth
};

struct Plan {
  std::vector<Prediction> ranked;  // fitting layouts, best throughput first
  int64_t considered = 0;          // layouts that divide
  int64_t too_big = 0;             // of those, how many do not fit in memory
};

Plan plan_layouts(const ModelConfig& c, const SystemSpec& s, const PlanRequest& r);
// Why the best layout beats the next ones: the breakdown terms where it gains most.
std::string explain_winner(const Plan& plan);

}  // namespace moet::sim
