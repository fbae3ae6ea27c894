// adamw.cpp — PyTorch's AdamW (torch.optim.AdamW, single-tensor path) on one flat range.
#include "kernels/cpu/common.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

template <typename T>
struct Consts {
  T decay, w1, b1, b2, w2, step_size, bc2s, eps, grad_scale;
};

// torch.lerp(m, g, w1) is m + w1 (g - m) for w1 < 0.5, else g - (g - m)(1 - w1).
template <typename T, bool kLerpLow>
void update_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                  int64_t n, const Consts<T> c) {
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i] * c.grad_scale;
    const T mi = kLerpLow ? m[i] + c.w1 * (gi - m[i]) : gi - (gi - m[i]) * c.b1;
    const T vi = v[i] * c.b2 + c.w2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / c.bc2s + c.eps;
    p[i] = p[i] * c.decay - c.step_size * (mi / denom);
  }
}

}  // namespace

// As torch: p *= 1 - lr wd; m.lerp_(g, 1 - β1); v = β2 v + (1 - β2) g²;
// denom = sqrt(v) / sqrt(1 - β2^t) + eps; p -= lr / (1 - β1^t) * m / denom.
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWSpec& spec) {
  OpScope op_scope("adamw", 0, double(p.bytes()) * 7);
  const int64_t n = p.numel();
  MOET_CHECK(g.numel() == n && m.numel() == n && v.numel() == n, "adamw: p ", p.shape_str(), " g ",
             g.shape_str(), " m ", m.shape_str(), " v ", v.shape_str());
  MOET_CHECK(spec.step >= 1, "adamw: step is 1-based, got ", spec.step);
  check_dtype(p.dtype, {&g, &m, &v});
  const double bc1 = 1.0 - std::pow(spec.beta1, double(spec.step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(spec.beta2, double(spec.step)));
  dispatch_float(p.dtype, [&](auto t0) {
    using T = decltype(t0);
    const Consts<T> c{T(1.0 - spec.lr * spec.weight_decay),
                      T(1.0 - spec.beta1),
                      T(spec.beta1),
                      T(spec.beta2),
                      T(1.0 - spec.beta2),
                      T(spec.lr / bc1),
                      T(bc2_sqrt),
                      T(spec.eps),
                      T(spec.grad_scale)};
    T* pp = p.data<T>();
    const T* pg = g.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    const bool lerp_low = 1.0 - spec.beta1 < 0.5;
    parallel_ranges(n, [&](int64_t b, int64_t e) {
      if (lerp_low)
        update_range<T, true>(pp + b, pg + b, pm + b, pv + b, e - b, c);
      else
        update_range<T, false>(pp + b, pg + b, pm + b, pv + b, e - b, c);
    });
  });
}

}  // namespace moet::ops
