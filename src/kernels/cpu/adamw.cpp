// adamw.cpp — PyTorch's AdamW (torch.optim.AdamW, single-tensor path) on one flat range.
#include "kernels/cpu/common.h"
#include "kernels/ops.h"

namespace moet::ops {
using namespace cpu;

// As torch: p *= 1 - lr wd; m.lerp_(g, 1 - β1); v = β2 v + (1 - β2) g²;
// denom = sqrt(v) / sqrt(1 - β2^t) + eps; p -= lr / (1 - β1^t) * m / denom.
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWSpec& spec) {
  const int64_t n = p.numel();
  MOET_CHECK(g.numel() == n && m.numel() == n && v.numel() == n, "adamw: p ", p.shape_str(), " g ",
             g.shape_str(), " m ", m.shape_str(), " v ", v.shape_str());
  MOET_CHECK(spec.step >= 1, "adamw: step is 1-based, got ", spec.step);
  check_dtype(p.dtype, {&g, &m, &v});
  const double bc1 = 1.0 - std::pow(spec.beta1, double(spec.step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(spec.beta2, double(spec.step)));
  dispatch_float(p.dtype, [&](auto t0) {
    using T = decltype(t0);
    T* pp = p.data<T>();
    const T* pg = g.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    const bool lerp_low = 1.0 - spec.beta1 < 0.5;
    const T decay = T(1.0 - spec.lr * spec.weight_decay), w1 = T(1.0 - spec.beta1),
            b1 = T(spec.beta1), b2 = T(spec.beta2), w2 = T(1.0 - spec.beta2),
            step_size = T(spec.lr / bc1), bc2s = T(bc2_sqrt), eps = T(spec.eps);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = pg[i];
      // torch.lerp(m, g, w1): m + w1 (g - m) for w1 < 0.5, else g - (g - m)(1 - w1)
      const T mi = lerp_low ? pm[i] + w1 * (gi - pm[i]) : gi - (gi - pm[i]) * b1;
      const T vi = pv[i] * b2 + w2 * gi * gi;
      pm[i] = mi;
      pv[i] = vi;
      const T denom = std::sqrt(vi) / bc2s + eps;
      const T decayed = pp[i] * decay;
      pp[i] = decayed - step_size * (mi / denom);
    }
  });
}

}  // namespace moet::ops
