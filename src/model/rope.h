// RoPE tables for MLA's rope dims, with YaRN scaling as transformers computes it.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace moet {

// inv_freq for the R rope dims (R/2 values) and the factor cos/sin are multiplied by.
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};
RopeFrequencies rope_frequencies(const ModelConfig& c);

// cos_TR2[t][i] = cos(t * inv_freq[i]) * attention_factor (and sin likewise), t < T.
void fill_rope_tables(const ModelConfig& c, Tensor& cos_TR2, Tensor& sin_TR2);

// The softmax scale of MLA: 1/sqrt(qk_head_dim), times mscale² under YaRN.
double attention_softmax_scale(const ModelConfig& c);

}  // namespace moet
