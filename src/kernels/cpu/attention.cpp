// attention.cpp — RoPE (interleaved pairs) and causal softmax attention. Attention runs, for
// each (b, h) in parallel, BLAS GEMMs on strided per-head slices (row stride H*Kd or H*Vd) in
// row panels that skip the masked upper triangle; backward scratch is a grow-only thread-local
// T×T buffer.
#include <algorithm>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/common.h"
#include "kernels/ops.h"

namespace moet::ops {
using namespace cpu;

namespace {

constexpr int64_t kPanel = 64;  // attention row panel: a panel of queries sees keys [0, t1)

// x viewed [N, H, W] (2-D input is [N, W] with H = 1); rotates dims [off, off + 2*R2).
template <bool kInverse>
void rope_apply(Tensor& x, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2) {
  MOET_CHECK(x.ndim >= 2 && cos_TR2.ndim == 2 && sin_TR2.ndim == 2 &&
                 cos_TR2.size(0) == sin_TR2.size(0) && cos_TR2.size(1) == sin_TR2.size(1),
             "rope: x ", x.shape_str(), " cos ", cos_TR2.shape_str(), " sin ", sin_TR2.shape_str());
  const int64_t W = x.size(-1), H = x.ndim == 2 ? 1 : x.size(-2), N = x.numel() / (H * W);
  const int64_t T = cos_TR2.size(0), R2 = cos_TR2.size(1);
  MOET_CHECK(off >= 0 && off + 2 * R2 <= W && T > 0 && N % T == 0, "rope: x ", x.shape_str(),
             " off ", off, " R/2 ", R2, " T ", T);
  check_dtype(x.dtype, {&cos_TR2, &sin_TR2});
  dispatch_float(x.dtype, [&](auto t0) {
    using T_ = decltype(t0);
    T_* p = x.data<T_>();
    const T_* cs = cos_TR2.data<T_>();
    const T_* sn = sin_TR2.data<T_>();
#pragma omp parallel for schedule(static) if (N * H * R2 > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T_* c = cs + (n % T) * R2;
      const T_* s = sn + (n % T) * R2;
      for (int64_t h = 0; h < H; ++h) {
        T_* v = p + (n * H + h) * W + off;
        for (int64_t i = 0; i < R2; ++i) {
          const T_ a = v[2 * i], b = v[2 * i + 1];
          if constexpr (kInverse) {
            v[2 * i] = a * c[i] + b * s[i];
            v[2 * i + 1] = b * c[i] - a * s[i];
          } else {
            v[2 * i] = a * c[i] - b * s[i];
            v[2 * i + 1] = b * c[i] + a * s[i];
          }
        }
      }
    }
  });
}

struct AttnDims {
  int64_t B, T, H, Kd, Vd;
};

AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                   const Tensor& o) {
  MOET_CHECK(q.ndim == 4 && k.ndim == 4 && v.ndim == 4 && probs.ndim == 4 && o.ndim == 4,
             "attention wants 4-D tensors: q ", q.shape_str(), " k ", k.shape_str(), " v ",
             v.shape_str(), " probs ", probs.shape_str(), " o ", o.shape_str());
  AttnDims d{q.size(0), q.size(1), q.size(2), q.size(3), v.size(3)};
  for (int i = 0; i < 4; ++i) MOET_CHECK(k.size(i) == q.size(i), "attention: k ", k.shape_str());
  MOET_CHECK(v.size(0) == d.B && v.size(1) == d.T && v.size(2) == d.H, "attention: v ",
             v.shape_str());
  for (int i = 0; i < 4; ++i) MOET_CHECK(o.size(i) == v.size(i), "attention: o ", o.shape_str());
  MOET_CHECK(
      probs.size(0) == d.B && probs.size(1) == d.H && probs.size(2) == d.T && probs.size(3) == d.T,
      "attention: probs ", probs.shape_str());
  check_dtype(q.dtype, {&k, &v, &probs, &o});
  return d;
}

template <typename T>
void attn_fwd(const AttnDims& d, const T* q, const T* k, const T* v, T scale, T* probs, T* o) {
  const int64_t B = d.B, Tn = d.T, H = d.H, Kd = d.Kd, Vd = d.Vd, lq = H * Kd, lv = H * Vd;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const T* Q = q + (b * Tn * H + h) * Kd;
    const T* K = k + (b * Tn * H + h) * Kd;
    const T* V = v + (b * Tn * H + h) * Vd;
    T* O = o + (b * Tn * H + h) * Vd;
    T* P = probs + bh * Tn * Tn;
    for (int64_t t0 = 0; t0 < Tn; t0 += kPanel) {
      const int64_t t1 = std::min(Tn, t0 + kPanel), r = t1 - t0;
      // scores of queries [t0, t1) against keys [0, t1)
      blas_gemm(false, true, r, t1, Kd, scale, Q + t0 * lq, lq, K, lq, T(0), P + t0 * Tn, Tn);
      for (int64_t t = t0; t < t1; ++t) {
        T* row = P + t * Tn;
        T m = row[0];
#pragma omp simd reduction(max : m)
        for (int64_t s = 1; s <= t; ++s) m = std::max(m, row[s]);
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t s = 0; s <= t; ++s) {
          row[s] = exp_fast(row[s] - m);
          sum += double(row[s]);
        }
        const T inv = T(1.0 / sum);
        for (int64_t s = 0; s <= t; ++s) row[s] *= inv;
        std::fill(row + t + 1, row + Tn, T(0));
      }
      blas_gemm(false, false, r, Vd, t1, T(1), P + t0 * Tn, Tn, V, lv, T(0), O + t0 * lv, lv);
    }
  }
}

// dP = dO Vᵀ; dS = P ∘ (dP − rowsum(dP ∘ P)); dq = scale dS K; dk = scale dSᵀ Q; dv = Pᵀ dO.
template <typename T>
void attn_bwd(const AttnDims& d, const T* dout, const T* q, const T* k, const T* v, const T* probs,
              T scale, T* dq, T* dk, T* dv) {
  const int64_t B = d.B, Tn = d.T, H = d.H, Kd = d.Kd, Vd = d.Vd, lq = H * Kd, lv = H * Vd;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H, base_q = (b * Tn * H + h) * Kd,
                  base_v = (b * Tn * H + h) * Vd;
    const T* P = probs + bh * Tn * Tn;
    T* dS = scratch<T>(size_t(Tn * Tn), 1);  // rows t, keys s <= t
    for (int64_t t0 = 0; t0 < Tn; t0 += kPanel) {
      const int64_t t1 = std::min(Tn, t0 + kPanel), r = t1 - t0;
      blas_gemm(false, true, r, t1, Vd, T(1), dout + base_v + t0 * lv, lv, v + base_v, lv, T(0),
                dS + t0 * Tn, Tn);
      for (int64_t t = t0; t < t1; ++t) {
        const T* p = P + t * Tn;
        T* g = dS + t * Tn;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t s = 0; s <= t; ++s) dot += double(g[s]) * double(p[s]);
        const T c = T(dot);
        for (int64_t s = 0; s <= t; ++s) g[s] = p[s] * (g[s] - c);
        std::fill(g + t + 1, g + t1, T(0));
      }
      // dq rows [t0, t1) see keys [0, t1)
      blas_gemm(false, false, r, Kd, t1, scale, dS + t0 * Tn, Tn, k + base_q, lq, T(0),
                dq + base_q + t0 * lq, lq);
    }
    // dk, dv rows [s0, s1) receive from queries [s0, T)
    for (int64_t s0 = 0; s0 < Tn; s0 += kPanel) {
      const int64_t s1 = std::min(Tn, s0 + kPanel), r = s1 - s0, nq = Tn - s0;
      blas_gemm(true, false, r, Kd, nq, scale, dS + s0 * Tn + s0, Tn, q + base_q + s0 * lq, lq,
                T(0), dk + base_q + s0 * lq, lq);
      blas_gemm(true, false, r, Vd, nq, T(1), P + s0 * Tn + s0, Tn, dout + base_v + s0 * lv, lv,
                T(0), dv + base_v + s0 * lv, lv);
    }
  }
}

}  // namespace

void rope_forward(Tensor& x_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2) {
  rope_apply<false>(x_NHW, off, cos_TR2, sin_TR2);
}

void rope_backward(Tensor& dx_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2) {
  rope_apply<true>(dx_NHW, off, cos_TR2, sin_TR2);
}

void attention_forward(const Tensor& q_BTHK, const Tensor& k_BTHK, const Tensor& v_BTHV,
                       double scale, Tensor& probs_BHTT, Tensor& o_BTHV) {
  const AttnDims d = attn_dims(q_BTHK, k_BTHK, v_BTHV, probs_BHTT, o_BTHV);
  dispatch_float(q_BTHK.dtype, [&](auto t0) {
    using T = decltype(t0);
    attn_fwd<T>(d, q_BTHK.data<T>(), k_BTHK.data<T>(), v_BTHV.data<T>(), T(scale),
                probs_BHTT.data<T>(), o_BTHV.data<T>());
  });
}

void attention_backward(const Tensor& do_BTHV, const Tensor& q_BTHK, const Tensor& k_BTHK,
                        const Tensor& v_BTHV, const Tensor& probs_BHTT, double scale,
                        Tensor& dq_BTHK, Tensor& dk_BTHK, Tensor& dv_BTHV) {
  const AttnDims d = attn_dims(q_BTHK, k_BTHK, v_BTHV, probs_BHTT, do_BTHV);
  for (const Tensor* g : {&dq_BTHK, &dk_BTHK})
    MOET_CHECK(g->numel() == q_BTHK.numel() && g->dtype == q_BTHK.dtype, "attention bwd: dq/dk ",
               g->shape_str(), " vs q ", q_BTHK.shape_str());
  MOET_CHECK(dv_BTHV.numel() == v_BTHV.numel() && dv_BTHV.dtype == v_BTHV.dtype,
             "attention bwd: dv ", dv_BTHV.shape_str(), " vs v ", v_BTHV.shape_str());
  dispatch_float(q_BTHK.dtype, [&](auto t0) {
    using T = decltype(t0);
    attn_bwd<T>(d, do_BTHV.data<T>(), q_BTHK.data<T>(), k_BTHK.data<T>(), v_BTHV.data<T>(),
                probs_BHTT.data<T>(), T(scale), dq_BTHK.data<T>(), dk_BTHK.data<T>(),
                dv_BTHV.data<T>());
  });
}

}  // namespace moet::ops
