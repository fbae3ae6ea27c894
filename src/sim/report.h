// Printing predictions: the JSON array of `moet simulate --json` and the human tables of
// `moet simulate` and `moet plan`.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "sim/planner.h"
#include "sim/published_rows.h"
#include "sim/step_model.h"

namespace moet::sim {

// One object per prediction with exactly tflops_per_gpu, tokens_per_s_per_gpu, step_time_s,
// mfu, memory_gb_per_gpu, fits, breakdown (+ efficiency when `with_efficiency`).
std::string predictions_json(const std::vector<Prediction>& ps, bool with_efficiency);
// "260.0 GFLOP per token (Megatron-Core's formula, seq 4096, MTP 1)"
std::string flops_line(const Prediction& p);
void print_predictions(std::FILE* out, const SystemSpec& s, const std::vector<Prediction>& ps);
// `band`: the validation's error band for these predictions (null: no published row validates
// the model, which is said instead). Layouts closer to #1 than the band are marked equivalent.
void print_plan(std::FILE* out, const SystemSpec& s, const Plan& plan, size_t top,
                const ErrorBand* band);

// What a prediction rests on, one line: CUDA graphs, all-to-all overlap, recompute, routing.
std::string assumptions_line(const SimLayout& l);
// "-4% to +14% (8 published DeepSeek-V3 rows with full CUDA graphs, docs/simulator.md)"
std::string band_line(const ErrorBand& b, const std::string& cuda_graphs);
// A token budget as days of training and GPU-hours at the prediction's rate.
std::string tokens_line(const Prediction& p, double tokens);
// The validation table: each published row, its recipe, prediction and error (markdown).
void print_published(std::FILE* out, const std::vector<RowCheck>& checks);

}  // namespace moet::sim
