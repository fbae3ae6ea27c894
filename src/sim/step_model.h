// The step: slots placed on pipeline ranks, interleaved 1F1B bubble, expert all-to-all hidden
// behind the other half micro-batch's compute, data-parallel reduce-scatter / all-gather hidden
// behind backward / forward, optimizer; memory per GPU; Megatron-counted TFLOP/s.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "sim/parallel_layout.h"
#include "sim/system_spec.h"

namespace moet::sim {

// Seconds per step. compute + a2a_exposed + pp_bubble + dp_exposed + optimizer = step time;
// compute = gemm + attention + memory_bound + tp_comm + cp_comm + launch + contention.
struct Breakdown {
  double compute = 0, a2a_exposed = 0, pp_bubble = 0, dp_exposed = 0, optimizer = 0;
  double gemm = 0, attention = 0, memory_bound = 0, tp_comm = 0, launch = 0, contention = 0;
  double cp_comm = 0;    // context parallelism's KV-latent exchange (exposed)
  double recompute = 0;  // forward work redone in backward (inside compute)
  double a2a_total = 0;  // dispatch + combine before overlap
  double dp_total = 0;   // gradient reduce-scatter + parameter all-gather before overlap
};

struct MemoryUse {  // GB per GPU (the fullest pipeline rank)
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, reserve = 0;
  double total() const { return weights + gradients + optimizer + activations + reserve; }
};

struct Prediction {
  SimLayout layout;
  double flops_per_token = 0;  // Megatron's formula (metrics/flops.h)
  double step_time_s = 0, tflops_per_gpu = 0, tokens_per_s_per_gpu = 0, mfu = 0;
  double efficiency = 1;  // per-GPU throughput against the first row of a scaling run
  bool fits = false;
  double memory_gb_per_gpu = 0;
  MemoryUse memory;
  Breakdown breakdown;
  double a2a_gb_nvlink = 0, a2a_gb_scaleout = 0;  // per GPU per step
  int64_t micro_batches = 0;                      // per rank per step
  std::string pp_layout;  // the stages used, in Megatron's layout syntax (PP > 1)
};

Prediction simulate(const ModelConfig& c, const SimLayout& l, const SystemSpec& s);
// One prediction per GPU count at the same global batch; efficiency against the first.
std::vector<Prediction> simulate_scaling(const ModelConfig& c, SimLayout l, const SystemSpec& s,
                                         const std::vector<int64_t>& gpus);

}  // namespace moet::sim
