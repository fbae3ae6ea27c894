#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace moet {

namespace {
double yarn_mscale(double factor, double m) {
  return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}
}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& c) {
  const int64_t R = c.qk_rope_head_dim;
  const double base = c.rope_theta;
  RopeFrequencies f;
  f.inv_freq.resize(R / 2);
  for (int64_t i = 0; i < R / 2; ++i) f.inv_freq[i] = 1.0 / std::pow(base, double(2 * i) / R);
  const RopeScaling& y = c.rope_scaling;
  if (!y.yarn) return f;
  const double orig = double(y.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return R * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(y.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(y.beta_slow)), double(R - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < R / 2; ++i) {
    double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    double extrapolation = 1.0 - ramp;
    f.inv_freq[i] =
        f.inv_freq[i] / y.factor * (1.0 - extrapolation) + f.inv_freq[i] * extrapolation;
  }
  if (y.mscale != 0.0 && y.mscale_all_dim != 0.0)
    f.attention_factor = yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim);
  else
    f.attention_factor = yarn_mscale(y.factor, 1.0);
  return f;
}

void fill_rope_tables(const ModelConfig& c, Tensor& cos_TR2, Tensor& sin_TR2) {
  RopeFrequencies f = rope_frequencies(c);
  const int64_t T = cos_TR2.size(0), R2 = cos_TR2.size(1);
  MOET_ASSERT(R2 == int64_t(f.inv_freq.size()) && sin_TR2.size(0) == T);
  float* cs = cos_TR2.f32();
  float* sn = sin_TR2.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < R2; ++i) {
      double a = double(t) * f.inv_freq[i];
      cs[t * R2 + i] = float(std::cos(a) * f.attention_factor);
      sn[t * R2 + i] = float(std::sin(a) * f.attention_factor);
    }
}

double attention_softmax_scale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(double(c.qk_head_dim()));
  const RopeScaling& y = c.rope_scaling;
  if (y.yarn && y.mscale_all_dim != 0.0) {
    double m = yarn_mscale(y.factor, y.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

}  // namespace moet
