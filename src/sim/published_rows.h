// Every published DeepSeek-V3 pre-training row moet's catalog can simulate, with the recipe it
// ran (NVIDIA Megatron-Bridge's performance summary, containers 25.09 to 26.08, and the recipes
// of each release), and the model's prediction and error for each. The validation table of
// docs/simulator.md is this table; the error band simulate and plan print comes from it.
#pragma once
#include <string>
#include <vector>

#include "sim/step_model.h"

namespace moet::sim {

struct PublishedRow {
  std::string id;           // D5: the row in docs/simulator.md's validation table
  std::string container;    // NeMo container, e.g. "26.06"
  std::string system;       // catalog name
  SimLayout layout;         // the recipe's layout and flags
  double tflops = 0;        // published model TFLOP/s per GPU
  bool flags_known = true;  // false: the recipe's flags are not published (taken from its preset)
};

const std::vector<PublishedRow>& published_rows();
// The rows validate DeepSeek-V3's shape (hidden 7168, 61 layers, 256 routed experts, top-8).
bool validated_model(const ModelConfig& c);

struct RowCheck {
  PublishedRow row;
  Prediction prediction;
  double error = 0;              // predicted / published − 1
  double framework_host_us = 0;  // the fitted constant this prediction used
};
// Each row simulated with the catalog. The one constant fitted to these rows,
// framework_host_us (it acts only outside full CUDA graphs), is with `leave_one_out` refitted
// for each row that uses it without that row, so no row validates a constant it set.
std::vector<RowCheck> check_published_rows(const ModelConfig& dsv3, bool leave_one_out = false);
// framework_host_us fitted to the rows run outside full CUDA graphs (least squares of the log
// error), leaving out row `skip` (an id; empty: none).
double fit_framework_host_us(const ModelConfig& dsv3, const std::string& skip = "");

// The band the validation supports for a prediction with these CUDA graphs: the smallest and
// largest error of the rows that ran with them (or all rows when none did).
struct ErrorBand {
  double low = 0, high = 0;  // e.g. −0.04, +0.14
  int rows = 0;
};
ErrorBand error_band(const std::vector<RowCheck>& checks, const std::string& cuda_graphs);

}  // namespace moet::sim
