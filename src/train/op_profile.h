// Per-op profile of a training step (`moet bench --model`): a few steps of a model on mock
// tokens in one process with the op profiler (kernels/profile.h) installed; each op's time per
// step, its share of the step, and its GFLOP/s (GEMMs, attention) or GB/s (memory-bound ops).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "measure/stream.h"
#include "train/train_options.h"

namespace moet {

struct OpProfileOptions {
  std::string model_path;
  PrecisionOptions precision;  // --precision and --bf16-layers, as moet train takes them
  int64_t micro_batch = 4, seq = 256;
  int64_t warmup = 2, steps = 3;  // untimed steps, then profiled steps
  int threads = 0;                // 0: all cores
};

struct OpProfileRow {
  std::string op;
  double calls_per_step = 0, ms_per_step = 0, share = 0;
  double gflops = 0, gbps = 0;  // per second of the op's own time; 0 when not counted
  bool memory_bound() const { return gbps > 0 && gflops == 0; }
};

struct OpProfile {
  std::string model, precision, kernels;
  int64_t micro_batch = 0, seq = 0, threads = 0;
  double step_s = 0, tokens_per_s = 0, model_tflops = 0;  // Megatron FLOPs
  std::vector<OpProfileRow> rows;  // by time, largest first; "other" = step − Σ ops
  // The machine's copy bandwidth: STREAM (arrays 4× the L3) and the same kernels on arrays of one
  // activation (micro-batch tokens × hidden floats), the size the step's memory-bound ops touch.
  StreamBandwidth stream, stream_activation;
};

OpProfile profile_training_step(const OpProfileOptions& o);
std::string op_profile_table(const OpProfile& p);
std::string op_profile_json(const OpProfile& p);

}  // namespace moet
