// attention.cpp — causal softmax attention, forward and backward, as flash attention on GEMM
// calls: for each (b, h) in parallel, K and V are packed once (contiguous, in the operand type of
// the products), then for each tile of 128 queries the scores against every key it can see come
// from one GEMM (128 × keys × Kd), the softmax runs on those rows in fp32, and P·V is one more
// GEMM (keys as the reduction). Only each row's log-sum-exp is kept for backward, which
// recomputes the probabilities the same way. With bf16 operands (bf16 and FP8 recipes) every
// product takes bf16 operands — q, k, v, the probabilities, dO, dS — packed as bf16 bits and
// multiplied by the bf16 GEMM where operands are stored so (gemm_operand_dtype()), else as bf16
// values in fp32; statistics and accumulation stay fp32. Scratch per thread: a few [128, T] rows
// of scores and [T, Kd] packs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu/convert.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

constexpr int64_t kTile = 128;  // queries per tile

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

// The operands of the products: element type P (T itself; float holding bf16 values; or bf16
// bits), whether values are rounded to bf16, and the thread's scratch for them.
template <typename T, typename P>
struct Operands {
  bool bf16;
  // Writes n values of x into p: copied, or rounded to bf16 (as fp32 or as bits).
  void pack(const T* x, int64_t n, P* p) const {
    if constexpr (std::is_same_v<P, uint16_t>) {
      f32_to_bf16(x, p, n);
    } else {
      if constexpr (std::is_same_v<T, float>)
        if (bf16) return round_bf16_f32(x, p, n);
      if (x != p) std::copy(x, x + n, p);
    }
  }
  // rows × cols of x (row stride ld) packed contiguous into p.
  void pack_rows(const T* x, int64_t rows, int64_t cols, int64_t ld, P* p) const {
    for (int64_t i = 0; i < rows; ++i) pack(x + i * ld, cols, p + i * cols);
  }
  // The value a product sees of x.
  T value(T x) const {
    if constexpr (std::is_same_v<T, float>) return bf16 ? round_bf16(x) : x;
    return x;
  }
  // Thread-local buffers of P: slots 4.. for float (0..3 hold the fp32 score rows), from 0 for
  // bf16 bits.
  P* buffer(size_t n, int i) const { return scratch<P>(n, (std::is_same_v<P, T> ? 4 : 0) + i); }
};

// A GEMM whose A and B are operands (P) and whose C accumulates in T.
template <typename T, typename P>
void mul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const P* A, int64_t lda,
         const P* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  blas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Writes n fp32 values into an operand copy (F32 rounded values or bf16 bits) at element `at`.
inline void put_operand(const float* x, int64_t n, Format fmt, const Tensor& t, int64_t at) {
  if (t.dtype == DType::BF16)
    f32_to_bf16(x, t.bf16() + at, n);
  else if (fmt == Format::BF16)
    round_bf16_f32(x, t.f32() + at, n);
  else
    std::copy(x, x + n, t.f32() + at);
}

// Forward of one (b, h): rows of q/k/v/o at stride lq/lv from their first element. For each
// query tile: S = scale·Q·K[0, i1)ᵀ (one GEMM), each row's max m and sum l of exp(S − m) over
// the keys it sees (s <= t), lse = m + log l; then O = P·V[0, i1) (one GEMM) with
// - fp32: P = exp(S − m), O scaled by 1/l;
// - bf16: P = bf16(exp(S − lse)), the normalised probabilities, computed exactly as backward
//   recomputes them (the same GEMM for S, the same lse), so both passes round the same P.
// oq: o's operand copy (element-wise formats), this head's columns at row stride oq_ld.
template <typename T, typename P>
void attn_fwd_head(const AttnDims& d, const Operands<T, P>& op, const T* Q, const T* K, const T* V,
                   T scale, T* L, T* O, const Operand& oq, int64_t oq_at, int64_t oq_ld) {
  const int64_t Tn = d.T, Kd = d.Kd, Vd = d.Vd, lq = d.H * Kd, lv = d.H * Vd;
  P* Kp = op.buffer(size_t(Tn * Kd), 0);
  P* Vp = op.buffer(size_t(Tn * Vd), 1);
  P* Qp = op.buffer(size_t(kTile * Kd), 2);
  op.pack_rows(K, Tn, Kd, lq, Kp);
  op.pack_rows(V, Tn, Vd, lv, Vp);
  T* S = scratch<T>(size_t(kTile * Tn), 0);    // scores, then probabilities, of a query tile
  T* acc = scratch<T>(size_t(kTile * Vd), 1);  // the tile's output rows
  T* inv = scratch<T>(size_t(kTile), 2);
  // as bf16 bits the probabilities need a buffer of their own; as T they stay in S
  P* Pp = std::is_same_v<P, T> ? reinterpret_cast<P*>(S) : op.buffer(size_t(kTile * Tn), 3);
  for (int64_t i0 = 0; i0 < Tn; i0 += kTile) {
    const int64_t i1 = std::min(Tn, i0 + kTile), r = i1 - i0;
    op.pack_rows(Q + i0 * lq, r, Kd, lq, Qp);
    mul<T, P>(false, true, r, i1, Kd, scale, Qp, Kd, Kp, Kd, T(0), S, i1);
    for (int64_t i = 0; i < r; ++i) {
      T* row = S + i * i1;
      const int64_t valid = i0 + i + 1;  // keys s <= t
      const T mx = max_of(row, valid);
      std::fill(row + valid, row + i1, T(0));
      if (!op.bf16) {
        exp_shifted(row, valid, mx);
        const T sum = sum_of(row, valid);
        L[i0 + i] = mx + std::log(sum);
        inv[i] = T(1) / sum;
        continue;
      }
      // the sum from a copy of the row, then P from the scores themselves
      T* e = scratch<T>(size_t(i1), 3);
      std::copy(row, row + valid, e);
      exp_shifted(e, valid, mx);
      const T li = mx + std::log(sum_of(e, valid));
      L[i0 + i] = li;
      exp_shifted(row, valid, li);
      op.pack(row, i1, Pp + i * i1);
    }
    mul<T, P>(false, false, r, Vd, i1, T(1), Pp, i1, Vp, Vd, T(0), acc, Vd);
    for (int64_t i = 0; i < r; ++i) {
      T* orow = O + (i0 + i) * lv;
      const T* a = acc + i * Vd;
      if (op.bf16)
        std::copy(a, a + Vd, orow);
      else
        for (int64_t j = 0; j < Vd; ++j) orow[j] = a[j] * inv[i];
      if constexpr (std::is_same_v<T, float>)
        if (!oq.rows.empty()) put_operand(orow, Vd, oq.fmt, oq.rows, oq_at + (i0 + i) * oq_ld);
    }
  }
}

// g = p ∘ (g − d), in place on g.
template <typename T>
inline void ds_of(const T* __restrict p, T* __restrict g, int64_t n, T d) {
#pragma omp simd
  for (int64_t s = 0; s < n; ++s) g[s] = p[s] * (g[s] - d);
}

// Backward of one (b, h) (strides as forward; dq, dk, dv at the same offsets as q, k, v):
// Dr = rowsum(dO ∘ O) (dO as the products see it); per query tile, over the keys it sees,
// P = exp(scale·Q·Kᵀ − lse), dP = dO·Vᵀ, dS = P ∘ (dP − Dr) (fp32), then dV += Pᵀ·dO,
// dQ = scale·dS·K, dK += scale·dSᵀ·Q — five GEMMs per tile, no T×T buffer. dq is written once
// per tile; dk and dv accumulate over tiles in order, in this thread: deterministic.
template <typename T, typename P>
void attn_bwd_head(const AttnDims& d, const Operands<T, P>& op, const T* dO, const T* Q, const T* K,
                   const T* V, const T* O, const T* L, T scale, T* dQ, T* dK, T* dV) {
  const int64_t Tn = d.T, Kd = d.Kd, Vd = d.Vd, lq = d.H * Kd, lv = d.H * Vd;
  P* Kp = op.buffer(size_t(Tn * Kd), 0);
  P* Vp = op.buffer(size_t(Tn * Vd), 1);
  P* Qp = op.buffer(size_t(kTile * Kd), 2);
  P* dOp = op.buffer(size_t(Tn * Vd), 3);
  op.pack_rows(K, Tn, Kd, lq, Kp);
  op.pack_rows(V, Tn, Vd, lv, Vp);
  op.pack_rows(dO, Tn, Vd, lv, dOp);
  T* Sm = scratch<T>(size_t(kTile * Tn), 0);  // P of a query tile
  T* dS = scratch<T>(size_t(kTile * Tn), 1);  // dP, then dS
  T* Dr = scratch<T>(size_t(Tn), 2);
  P* Pp = std::is_same_v<P, T> ? reinterpret_cast<P*>(Sm) : op.buffer(size_t(kTile * Tn), 4);
  P* dSp = std::is_same_v<P, T> ? reinterpret_cast<P*>(dS) : op.buffer(size_t(kTile * Tn), 5);
  for (int64_t t = 0; t < Tn; ++t) {
    const T* a = dO + t * lv;
    const T* b = O + t * lv;
    T s = 0;
    for (int64_t j = 0; j < Vd; ++j) s += op.value(a[j]) * b[j];
    Dr[t] = s;
  }
  for (int64_t t = 0; t < Tn; ++t) {
    std::fill_n(dK + t * lq, Kd, T(0));
    std::fill_n(dV + t * lv, Vd, T(0));
  }
  for (int64_t i0 = 0; i0 < Tn; i0 += kTile) {
    const int64_t i1 = std::min(Tn, i0 + kTile), r = i1 - i0;
    op.pack_rows(Q + i0 * lq, r, Kd, lq, Qp);
    mul<T, P>(false, true, r, i1, Kd, scale, Qp, Kd, Kp, Kd, T(0), Sm, i1);
    mul<T, P>(false, true, r, i1, Vd, T(1), dOp + i0 * Vd, Vd, Vp, Vd, T(0), dS, i1);
    for (int64_t i = 0; i < r; ++i) {
      T* p = Sm + i * i1;
      T* g = dS + i * i1;
      const int64_t valid = i0 + i + 1;
      const T li = L[i0 + i], di = Dr[i0 + i];
      exp_shifted(p, valid, li);
      ds_of(p, g, valid, di);
      std::fill(p + valid, p + i1, T(0));
      std::fill(g + valid, g + i1, T(0));
      op.pack(p, i1, Pp + i * i1);
      op.pack(g, i1, dSp + i * i1);
    }
    mul<T, P>(true, false, i1, Vd, r, T(1), Pp, i1, dOp + i0 * Vd, Vd, T(1), dV, lv);
    mul<T, P>(false, false, r, Kd, i1, scale, dSp, i1, Kp, Kd, T(0), dQ + i0 * lq, lq);
    mul<T, P>(true, false, i1, Kd, r, scale, dSp, i1, Qp, Kd, T(1), dK, lq);
  }
}

// Runs fn(b, h, row offset of q/k, row offset of v/o) for each (b, h), one thread each.
template <typename Fn>
void for_each_head(const AttnDims& d, Fn&& fn) {
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t b = bh / d.H, h = bh % d.H;
    fn(bh, (b * d.T * d.H + h) * d.Kd, (b * d.T * d.H + h) * d.Vd);
  }
}

// Calls fn(Operands<T, P>) with P the operand type of this call: bf16 bits where bf16 operands
// are stored so, else T.
template <typename T, typename Fn>
void with_operands(bool bf16, Fn&& fn) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && gemm_operand_dtype() == DType::BF16) return fn(Operands<T, uint16_t>{true});
  }
  fn(Operands<T, T>{bf16});
}

}  // namespace

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
                       double scale, Tensor& lse_BHT, Tensor& o_BTHV, Format operands,
                       const Operand& oq) {
  OpScope op_scope("attention fwd", attention_flops(q_BTHK, v_BTHV, 1.0), 0);
  const AttnDims d = attn_dims(q_BTHK, k_BTHK, v_BTHV, lse_BHT, o_BTHV);
  const bool bf16 = operands == Format::BF16;
  MOET_CHECK(operands == Format::F32 || bf16, "attention operands must be fp32 or bf16, got ",
             format_name(operands));
  MOET_CHECK(oq.empty() || (!is_fp8(oq.fmt) && oq.cols.empty() && o_BTHV.dtype == DType::F32 &&
                            oq.rows.numel() == o_BTHV.numel()),
             "attention: o's operands must be one element-wise copy of o");
  dispatch_float(q_BTHK.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T *q = q_BTHK.data<T>(), *k = k_BTHK.data<T>(), *v = v_BTHV.data<T>();
    T *lse = lse_BHT.data<T>(), *o = o_BTHV.data<T>();
    with_operands<T>(bf16, [&](const auto& op) {
      for_each_head(d, [&](int64_t bh, int64_t at_q, int64_t at_v) {
        attn_fwd_head(d, op, q + at_q, k + at_q, v + at_v, T(scale), lse + bh * d.T, o + at_v, oq,
                      at_v, d.H * d.Vd);
      });
    });
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
    const T *q = q_BTHK.data<T>(), *k = k_BTHK.data<T>(), *v = v_BTHV.data<T>(),
            *o = o_BTHV.data<T>(), *dO = do_BTHV.data<T>(), *lse = lse_BHT.data<T>();
    T *dq = dq_BTHK.data<T>(), *dk = dk_BTHK.data<T>(), *dv = dv_BTHV.data<T>();
    with_operands<T>(bf16, [&](const auto& op) {
      for_each_head(d, [&](int64_t bh, int64_t at_q, int64_t at_v) {
        attn_bwd_head(d, op, dO + at_v, q + at_q, k + at_q, v + at_v, o + at_v, lse + bh * d.T,
                      T(scale), dq + at_q, dk + at_q, dv + at_v);
      });
    });
  });
}

}  // namespace moet::ops
