// adamw.cpp — PyTorch's AdamW (torch.optim.AdamW, single-tensor path) on one flat range, with
// the moments stored in fp32 or bf16 (the precision-aware optimizer: computed in fp32, stored
// rounded to nearest even, as Transformer Engine's FusedAdam does).
#include <type_traits>

#include "core/bf16.h"
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

// A moment read from its storage (bf16, as uint16_t, widened exactly) or written to it (rounded
// to nearest even); fp32 and fp64 pass as they are.
template <typename To, typename From>
To convert(From x) {
  if constexpr (std::is_same_v<From, uint16_t>)
    return bf16_to_float(x);
  else if constexpr (std::is_same_v<To, uint16_t>)
    return bf16_bits(x);
  else
    return x;
}

// torch.lerp(m, g, w1) is m + w1 (g - m) for w1 < 0.5, else g - (g - m)(1 - w1). The new moments
// update p before they are rounded to their storage (TE's multi_tensor_adam does the same).
template <typename T, bool kLerpLow, typename M, typename V>
void update_range(T* __restrict p, const T* __restrict g, M* __restrict m, V* __restrict v,
                  int64_t n, const Consts<T> c) {
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i] * c.grad_scale;
    const T m0 = convert<T>(m[i]), v0 = convert<T>(v[i]);
    const T mi = kLerpLow ? m0 + c.w1 * (gi - m0) : gi - (gi - m0) * c.b1;
    const T vi = v0 * c.b2 + c.w2 * gi * gi;
    m[i] = convert<M>(mi);
    v[i] = convert<V>(vi);
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
  check_dtype(p.dtype, {&g});
  for (const Tensor* s : {&m, &v})  // a moment is p's dtype, or bf16 beside fp32 weights
    MOET_CHECK(s->dtype == p.dtype || (s->dtype == DType::BF16 && p.dtype == DType::F32),
               "adamw: moments of ", dtype_name(p.dtype), " weights in ", dtype_name(s->dtype));
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
    const bool lerp_low = 1.0 - spec.beta1 < 0.5;
    auto run = [&](auto* pm, auto* pv) {
      parallel_ranges(n, [&](int64_t b, int64_t e) {
        if (lerp_low)
          update_range<T, true>(pp + b, pg + b, pm + b, pv + b, e - b, c);
        else
          update_range<T, false>(pp + b, pg + b, pm + b, pv + b, e - b, c);
      });
    };
    const bool m16 = m.dtype == DType::BF16, v16 = v.dtype == DType::BF16;
    if constexpr (std::is_same_v<T, float>) {
      if (m16 && v16)
        run(m.bf16(), v.bf16());
      else if (m16)
        run(m.bf16(), v.data<T>());
      else if (v16)
        run(m.data<T>(), v.bf16());
      else
        run(m.data<T>(), v.data<T>());
    } else {
      run(m.data<T>(), v.data<T>());
    }
  });
}

}  // namespace moet::ops
