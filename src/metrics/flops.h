// Model FLOPs per token by Megatron-Core's formula (num_floating_point_operations in Megatron-LM's
// megatron/training/training.py): every GEMM counts 6 FLOPs per multiply-accumulate (forward,
// input gradient, weight gradient); router GEMMs and norms are not counted; causal core attention
// is halved.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace moet {

// The terms of flops_per_token, each in FLOPs per token.
struct FlopBreakdown {
  double ffn = 0;        // dense MLPs, routed experts (K per token) and shared experts
  double attn_proj = 0;  // MLA projections
  double attn_core = 0;  // QK^T and PV, causal (halved)
  double mtp_proj = 0;   // MTP norms and eh_proj
  double logits = 0;     // lm_head, once per main model and MTP module
  double total() const { return ffn + attn_proj + attn_core + mtp_proj + logits; }
};

FlopBreakdown flops_breakdown(const ModelConfig& c, int64_t seq_len, bool with_mtp);
double flops_per_token(const ModelConfig& c, int64_t seq_len, bool with_mtp);

// Model TFLOP/s for `tokens` tokens processed in `seconds` (on `devices` devices: per device).
double model_tflops(double flops_per_token, double tokens, double seconds, int64_t devices = 1);

}  // namespace moet
