// Printing predictions: the JSON array of `moet simulate --json` and the human tables of
// `moet simulate` and `moet plan`.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "sim/planner.h"
#include "sim/step_model.h"

namespace moet::sim {

// One object per prediction with exactly tflops_per_gpu, tokens_per_s_per_gpu, step_time_s,
// mfu, memory_gb_per_gpu, fits, breakdown (+ efficiency when `with_efficiency`).
std::string predictions_json(const std::vector<Prediction>& ps, bool with_efficiency);
// "260.0 GFLOP per token (Megatron-Core's formula, seq 4096, MTP 1)"
std::string flops_line(const Prediction& p);
void print_predictions(std::FILE* out, const SystemSpec& s, const std::vector<Prediction>& ps);
void print_plan(std::FILE* out, const SystemSpec& s, const Plan& plan, size_t top);

}  // namespace moet::sim
