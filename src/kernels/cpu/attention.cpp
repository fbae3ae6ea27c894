// attention.cpp — RoPE (interleaved pairs) and causal softmax attention. Attention is flash
// attention: for each (b, h) in parallel, tiles of 128 queries × 128 keys (the masked upper
// triangle skipped), BLAS GEMMs on strided per-head slices (row stride H*Kd or H*Vd), an online
// softmax, only each row's log-sum-exp kept for backward, which recomputes the probabilities.
// Scratch per thread is a few tiles, whatever the sequence length.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/common.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

constexpr int64_t kTile = 128;  // attention tiles: kTile queries × kTile keys

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

// Causal attention FLOPs of q·kᵀ and p·v (half of the square), times mult (backward: 2.5).
double attention_flops(const Tensor& q, const Tensor& v, double mult) {
  const double B = double(q.size(0)), T = double(q.size(1)), H = double(q.size(2));
  return mult * B * H * T * T * double(q.size(3) + v.size(3));
}

struct AttnDims {
  int64_t B, T, H, Kd, Vd;
};

AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                   const Tensor& o) {
  MOET_CHECK(q.ndim == 4 && k.ndim == 4 && v.ndim == 4 && o.ndim == 4,
             "attention wants 4-D q, k, v, o: q ", q.shape_str(), " k ", k.shape_str(), " v ",
             v.shape_str(), " o ", o.shape_str());
  AttnDims d{q.size(0), q.size(1), q.size(2), q.size(3), v.size(3)};
  for (int i = 0; i < 4; ++i) MOET_CHECK(k.size(i) == q.size(i), "attention: k ", k.shape_str());
  MOET_CHECK(v.size(0) == d.B && v.size(1) == d.T && v.size(2) == d.H, "attention: v ",
             v.shape_str());
  for (int i = 0; i < 4; ++i) MOET_CHECK(o.size(i) == v.size(i), "attention: o ", o.shape_str());
  MOET_CHECK(lse.numel() == d.B * d.H * d.T, "attention: lse ", lse.shape_str(),
             " for B·H·T = ", d.B * d.H * d.T);
  check_dtype(q.dtype, {&k, &v, &lse, &o});
  return d;
}

// Operands of the two products in bf16 (the bf16 recipe): rounded copies, fp32 arithmetic.
template <typename T>
inline void round_operands(T* p, int64_t n, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16)
      for (int64_t i = 0; i < n; ++i) p[i] = round_bf16(p[i]);
  } else {
    (void)p, (void)n, (void)bf16;
  }
}

// q, k, v, or q, k, v, dO, as the products see them: the tensors themselves, or their bf16
// roundings in thread-shared scratch (slot 5).
template <typename T>
const T* operand_copy(const T* x, int64_t n, bool bf16, int which) {
  if (!bf16) return x;
  T* c = scratch<T>(size_t(n), 4 + which);  // slots 4..7 of this element type
  std::copy(x, x + n, c);
  round_operands(c, n, true);
  return c;
}

// Flash attention forward (online softmax over key tiles): per (b, h) and query tile, running
// row maxima m and sums l, the output accumulated in a tile buffer and rescaled as m grows; the
// log-sum-exp of every row is kept for backward. No T×T buffer. With bf16 operands the
// probabilities that meet v are rounded normalised — the very P of backward — so a first pass
// over the key tiles finds each row's log-sum-exp and a second forms P = exp(S − lse) and P·v
// (one more q·kᵀ; the rounding then does not depend on the tiling).
template <typename T>
void attn_fwd(const AttnDims& d, const T* q, const T* k, const T* v, T scale, T* lse, T* o,
              bool bf16) {
  const int64_t B = d.B, Tn = d.T, H = d.H, Kd = d.Kd, Vd = d.Vd, lq = H * Kd, lv = H * Vd;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const T* Q = q + (b * Tn * H + h) * Kd;
    const T* K = k + (b * Tn * H + h) * Kd;
    const T* V = v + (b * Tn * H + h) * Vd;
    T* O = o + (b * Tn * H + h) * Vd;
    T* L = lse + bh * Tn;
    T* S = scratch<T>(size_t(kTile * kTile), 0);  // scores, then probabilities of a tile
    T* acc = scratch<T>(size_t(kTile * Vd), 1);   // output rows of the query tile
    T *m = scratch<T>(size_t(2 * kTile), 2), *l = m + kTile;
    for (int64_t i0 = 0; i0 < Tn; i0 += kTile) {
      const int64_t i1 = std::min(Tn, i0 + kTile), r = i1 - i0;
      std::fill_n(m, r, -std::numeric_limits<T>::infinity());
      std::fill_n(l, r, T(0));
      std::fill_n(acc, r * Vd, T(0));
      // one key tile: scores into S; with accumulate, S becomes exp(S − m) and acc += S·v with
      // the running statistics, else only the statistics are updated (first bf16 pass)
      auto key_tile = [&](int64_t j0, bool accumulate) {
        const int64_t j1 = std::min(i1, j0 + kTile), c = j1 - j0;
        blas_gemm(false, true, r, c, Kd, scale, Q + i0 * lq, lq, K + j0 * lq, lq, T(0), S, c);
        for (int64_t i = 0; i < r; ++i) {
          T* row = S + i * c;
          const int64_t valid = std::min(c, i0 + i - j0 + 1);  // keys s <= t
          T mx = m[i];
          for (int64_t s = 0; s < valid; ++s) mx = std::max(mx, row[s]);
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t s = 0; s < valid; ++s) {
            row[s] = exp_fast(row[s] - mx);
            sum += row[s];
          }
          std::fill(row + std::max<int64_t>(valid, 0), row + c, T(0));
          const T corr = exp_fast(m[i] - mx);  // 0 on the first tile (m = -inf)
          l[i] = l[i] * corr + sum;
          m[i] = mx;
          if (!accumulate) continue;
          T* a = acc + i * Vd;
          for (int64_t j = 0; j < Vd; ++j) a[j] *= corr;
        }
        if (accumulate)
          blas_gemm(false, false, r, Vd, c, T(1), S, c, V + j0 * lv, lv, T(1), acc, Vd);
      };
      // the normalised probabilities of one key tile, rounded, times v (second bf16 pass)
      auto key_tile_normalised = [&](int64_t j0) {
        const int64_t j1 = std::min(i1, j0 + kTile), c = j1 - j0;
        blas_gemm(false, true, r, c, Kd, scale, Q + i0 * lq, lq, K + j0 * lq, lq, T(0), S, c);
        for (int64_t i = 0; i < r; ++i) {
          T* row = S + i * c;
          const int64_t valid = std::min(c, i0 + i - j0 + 1);
          const T li = L[i0 + i];
#pragma omp simd
          for (int64_t s = 0; s < valid; ++s) row[s] = exp_fast(row[s] - li);
          std::fill(row + std::max<int64_t>(valid, 0), row + c, T(0));
        }
        round_operands(S, r * c, true);
        blas_gemm(false, false, r, Vd, c, T(1), S, c, V + j0 * lv, lv, T(1), acc, Vd);
      };
      for (int64_t j0 = 0; j0 < i1; j0 += kTile) key_tile(j0, !bf16);
      for (int64_t i = 0; i < r; ++i) L[i0 + i] = m[i] + std::log(l[i]);
      if (bf16) {
        for (int64_t j0 = 0; j0 < i1; j0 += kTile) key_tile_normalised(j0);
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < Vd; ++j) O[(i0 + i) * lv + j] = acc[i * Vd + j];
      } else {
        for (int64_t i = 0; i < r; ++i) {
          const T inv = T(1) / l[i];
          for (int64_t j = 0; j < Vd; ++j) O[(i0 + i) * lv + j] = acc[i * Vd + j] * inv;
        }
      }
    }
  }
}

// Flash attention backward: P recomputed per tile from the saved log-sum-exp;
// Dr = rowsum(dO ∘ O); dV += Pᵀ dO; dP = dO Vᵀ; dS = P ∘ (dP − Dr); dQ += scale dS K;
// dK += scale dSᵀ Q. One thread per (b, h), tiles in a fixed order: deterministic.
template <typename T>
void attn_bwd(const AttnDims& d, const T* dout, const T* q, const T* k, const T* v, const T* o,
              const T* lse, T scale, T* dq, T* dk, T* dv, bool bf16) {
  const int64_t B = d.B, Tn = d.T, H = d.H, Kd = d.Kd, Vd = d.Vd, lq = H * Kd, lv = H * Vd;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H, base_q = (b * Tn * H + h) * Kd,
                  base_v = (b * Tn * H + h) * Vd;
    const T* L = lse + bh * Tn;
    T* P = scratch<T>(size_t(kTile * kTile), 0);
    T* dS = scratch<T>(size_t(kTile * kTile), 1);
    T* Dr = scratch<T>(size_t(Tn), 2);
    for (int64_t t = 0; t < Tn; ++t) {
      const T* a = dout + base_v + t * lv;
      const T* b2 = o + base_v + t * lv;
      T s = 0;
      for (int64_t j = 0; j < Vd; ++j) s += a[j] * b2[j];
      Dr[t] = s;
    }
    for (int64_t t = 0; t < Tn; ++t) {
      std::fill_n(dq + base_q + t * lq, Kd, T(0));
      std::fill_n(dk + base_q + t * lq, Kd, T(0));
      std::fill_n(dv + base_v + t * lv, Vd, T(0));
    }
    for (int64_t i0 = 0; i0 < Tn; i0 += kTile) {
      const int64_t i1 = std::min(Tn, i0 + kTile), r = i1 - i0;
      for (int64_t j0 = 0; j0 < i1; j0 += kTile) {
        const int64_t j1 = std::min(i1, j0 + kTile), c = j1 - j0;
        blas_gemm(false, true, r, c, Kd, scale, q + base_q + i0 * lq, lq, k + base_q + j0 * lq, lq,
                  T(0), P, c);
        blas_gemm(false, true, r, c, Vd, T(1), dout + base_v + i0 * lv, lv, v + base_v + j0 * lv,
                  lv, T(0), dS, c);
        for (int64_t i = 0; i < r; ++i) {
          T* p = P + i * c;
          T* g = dS + i * c;
          const int64_t valid = std::min(c, i0 + i - j0 + 1);
          const T li = L[i0 + i], di = Dr[i0 + i];
#pragma omp simd
          for (int64_t s = 0; s < valid; ++s) {
            p[s] = exp_fast(p[s] - li);
            g[s] = p[s] * (g[s] - di);
          }
          for (int64_t s = std::max<int64_t>(valid, 0); s < c; ++s) p[s] = g[s] = T(0);
        }
        round_operands(P, r * c, bf16);
        round_operands(dS, r * c, bf16);
        blas_gemm(true, false, c, Vd, r, T(1), P, c, dout + base_v + i0 * lv, lv, T(1),
                  dv + base_v + j0 * lv, lv);
        blas_gemm(false, false, r, Kd, c, scale, dS, c, k + base_q + j0 * lq, lq, T(1),
                  dq + base_q + i0 * lq, lq);
        blas_gemm(true, false, c, Kd, r, scale, dS, c, q + base_q + i0 * lq, lq, T(1),
                  dk + base_q + j0 * lq, lq);
      }
    }
  }
}

}  // namespace

void rope_forward(Tensor& x_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2) {
  OpScope op_scope("rope", 0, 2.0 * double(x_NHW.bytes()));
  rope_apply<false>(x_NHW, off, cos_TR2, sin_TR2);
}

void rope_backward(Tensor& dx_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2) {
  OpScope op_scope("rope", 0, 2.0 * double(dx_NHW.bytes()));
  rope_apply<true>(dx_NHW, off, cos_TR2, sin_TR2);
}

void causal_softmax_rows(Tensor& s_RS, int64_t n, int64_t first, double scale) {
  OpScope op_scope("causal softmax", 0, 2.0 * double(s_RS.bytes()));
  MOET_CHECK(
      s_RS.ndim == 2 && n > 0 && s_RS.size(0) % n == 0 && first >= 0 && first + n <= s_RS.size(1),
      "causal softmax: scores ", s_RS.shape_str(), " for ", n, " queries from position ", first);
  const int64_t R = s_RS.size(0), S = s_RS.size(1);
  dispatch_float(s_RS.dtype, [&](auto t0) {
    using T = decltype(t0);
    T* base = s_RS.data<T>();
#pragma omp parallel for schedule(static) if (R * S > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      T* s = base + r * S;
      const int64_t last = first + r % n;  // the query's position: keys 0 .. last
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c <= last; ++c) mx = std::max(mx, T(scale) * s[c]);
      T sum = 0;
      for (int64_t c = 0; c <= last; ++c) {
        s[c] = std::exp(T(scale) * s[c] - mx);
        sum += s[c];
      }
      const T inv = T(1) / sum;
      for (int64_t c = 0; c <= last; ++c) s[c] *= inv;
      for (int64_t c = last + 1; c < S; ++c) s[c] = 0;
    }
  });
}

void attention_forward(const Tensor& q_BTHK, const Tensor& k_BTHK, const Tensor& v_BTHV,
                       double scale, Tensor& lse_BHT, Tensor& o_BTHV, Format operands) {
  OpScope op_scope("attention fwd", attention_flops(q_BTHK, v_BTHV, 1.0), 0);
  const AttnDims d = attn_dims(q_BTHK, k_BTHK, v_BTHV, lse_BHT, o_BTHV);
  const bool bf16 = operands == Format::BF16;
  MOET_CHECK(operands == Format::F32 || bf16, "attention operands must be fp32 or bf16, got ",
             format_name(operands));
  dispatch_float(q_BTHK.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* q = operand_copy(q_BTHK.data<T>(), q_BTHK.numel(), bf16, 0);
    const T* k = operand_copy(k_BTHK.data<T>(), k_BTHK.numel(), bf16, 1);
    const T* v = operand_copy(v_BTHV.data<T>(), v_BTHV.numel(), bf16, 2);
    attn_fwd<T>(d, q, k, v, T(scale), lse_BHT.data<T>(), o_BTHV.data<T>(), bf16);
  });
}

void attention_backward(const Tensor& do_BTHV, const Tensor& q_BTHK, const Tensor& k_BTHK,
                        const Tensor& v_BTHV, const Tensor& o_BTHV, const Tensor& lse_BHT,
                        double scale, Tensor& dq_BTHK, Tensor& dk_BTHK, Tensor& dv_BTHV,
                        Format operands) {
  OpScope op_scope("attention bwd", attention_flops(q_BTHK, v_BTHV, 2.5), 0);
  const AttnDims d = attn_dims(q_BTHK, k_BTHK, v_BTHV, lse_BHT, do_BTHV);
  MOET_CHECK(o_BTHV.numel() == do_BTHV.numel() && o_BTHV.dtype == do_BTHV.dtype,
             "attention bwd: o ", o_BTHV.shape_str(), " vs dO ", do_BTHV.shape_str());
  for (const Tensor* g : {&dq_BTHK, &dk_BTHK})
    MOET_CHECK(g->numel() == q_BTHK.numel() && g->dtype == q_BTHK.dtype, "attention bwd: dq/dk ",
               g->shape_str(), " vs q ", q_BTHK.shape_str());
  MOET_CHECK(dv_BTHV.numel() == v_BTHV.numel() && dv_BTHV.dtype == v_BTHV.dtype,
             "attention bwd: dv ", dv_BTHV.shape_str(), " vs v ", v_BTHV.shape_str());
  const bool bf16 = operands == Format::BF16;
  MOET_CHECK(operands == Format::F32 || bf16, "attention operands must be fp32 or bf16, got ",
             format_name(operands));
  dispatch_float(q_BTHK.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* q = operand_copy(q_BTHK.data<T>(), q_BTHK.numel(), bf16, 0);
    const T* k = operand_copy(k_BTHK.data<T>(), k_BTHK.numel(), bf16, 1);
    const T* v = operand_copy(v_BTHV.data<T>(), v_BTHV.numel(), bf16, 2);
    const T* dO = operand_copy(do_BTHV.data<T>(), do_BTHV.numel(), bf16, 3);
    attn_bwd<T>(d, dO, q, k, v, o_BTHV.data<T>(), lse_BHT.data<T>(), T(scale), dq_BTHK.data<T>(),
                dk_BTHK.data<T>(), dv_BTHV.data<T>(), bf16);
  });
}

}  // namespace moet::ops
