// Every published DeepSeek-V3 pre-training row moet's catalog can simulate, and the Kimi-K2 rows
// (the same architecture, a second model the fit never sees), with the recipe each ran (NVIDIA
// Megatron-Bridge's performance summary, containers 25.09 to 26.08, and the recipes of each
// release), and the model's prediction and error for each. The validation table of
// docs/simulator.md is this table; the error band simulate and plan print comes from its
// DeepSeek-V3 rows.
#pragma once
#include <string>
#include <vector>

#include "sim/step_model.h"

namespace moet::sim {

struct PublishedRow {
  std::string id;                     // D5: the row in docs/simulator.md's validation table
  std::string model = "deepseek-v3";  // or "kimi-k2" (configs/kimi-k2.json)
  std::string container;              // NeMo container, e.g. "26.06"
  std::string system;                 // catalog name
  SimLayout layout;                   // the recipe's layout and flags
  double tflops = 0;                  // published model TFLOP/s per GPU
  double tokens_per_s = 0;  // published tokens/s per GPU (their ratio: the FLOPs per token)
  bool flags_known = true;  // false: the recipe's flags are not published (taken from its preset)
};

const std::vector<PublishedRow>& published_rows();
// Which published model a config has the shape of: "deepseek-v3" (hidden 7168, 61 layers, 256
// routed experts, top-8), "kimi-k2" (the same with 384 experts), or "" (none: no row validates it).
std::string validated_model(const ModelConfig& c);
// The config of a published model ("deepseek-v3", "kimi-k2"), as configs/ holds it.
ModelConfig published_model_config(const std::string& model);

struct RowCheck {
  PublishedRow row;
  Prediction prediction;
  double error = 0;              // predicted / published − 1
  double framework_host_us = 0;  // the fitted constant this prediction used
};
// Each row simulated with the catalog. The one constant fitted to the DeepSeek-V3 rows,
// framework_host_us (it acts only outside full CUDA graphs), is with `leave_one_out` refitted
// for each row that uses it without that row, so no row validates a constant it set; the
// Kimi-K2 rows take the catalog's, fitted without them.
std::vector<RowCheck> check_published_rows(const ModelConfig& dsv3, bool leave_one_out = false);
// framework_host_us fitted to the DeepSeek-V3 rows run outside full CUDA graphs (least squares
// of the log error), leaving out row `skip` (an id; empty: none).
double fit_framework_host_us(const ModelConfig& dsv3, const std::string& skip = "");

// The band the validation supports for a prediction of `model` with these CUDA graphs: the
// smallest and largest error of that model's rows that ran with them (rows = 0: none did).
struct ErrorBand {
  double low = 0, high = 0;  // e.g. −0.04, +0.14
  int rows = 0;
  std::string model;  // "deepseek-v3" or "kimi-k2"
};
ErrorBand error_band(const std::vector<RowCheck>& checks, const std::string& cuda_graphs,
                     const std::string& model = "deepseek-v3");

}  // namespace moet::sim
