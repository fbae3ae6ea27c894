// gemm.cpp — matrix products through BLAS: gemm, linear (HF [out, in] weights) and the grouped
// per-expert linear over contiguous row slices.
#include "kernels/cpu/blas.h"
#include "kernels/cpu/common.h"
#include "kernels/ops.h"

namespace moet::ops {
using namespace cpu;

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha,
          double beta) {
  MOET_CHECK(a.ndim == 2 && b.ndim == 2 && c.ndim == 2, "gemm needs 2-D tensors, got ",
             a.shape_str(), " ", b.shape_str(), " ", c.shape_str());
  check_dtype(c.dtype, {&a, &b});
  const int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  const int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  MOET_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "gemm shapes: op(a) ", M, "x", K,
             ", op(b) ", Kb, "x", N, ", c ", c.shape_str());
  dispatch_float(c.dtype, [&](auto t0) {
    using T = decltype(t0);
    blas_gemm(trans_a, trans_b, M, N, K, T(alpha), a.data<T>(), a.size(1), b.data<T>(), b.size(1),
              T(beta), c.data<T>(), N);
  });
}

// x may have any leading dimensions: rows = numel / D.
void linear_forward(const Tensor& x_ND, const Tensor& w_OD, Tensor& y_NO) {
  MOET_CHECK(w_OD.ndim == 2, "linear weight must be 2-D, got ", w_OD.shape_str());
  const int64_t O = w_OD.size(0), D = w_OD.size(1), N = rows_of(x_ND);
  MOET_CHECK(x_ND.size(-1) == D && y_NO.size(-1) == O && rows_of(y_NO) == N, "linear: x ",
             x_ND.shape_str(), " w ", w_OD.shape_str(), " y ", y_NO.shape_str());
  check_dtype(y_NO.dtype, {&x_ND, &w_OD});
  dispatch_float(y_NO.dtype, [&](auto t0) {
    using T = decltype(t0);
    blas_gemm(false, true, N, O, D, T(1), x_ND.data<T>(), D, w_OD.data<T>(), D, T(0),
              y_NO.data<T>(), O);
  });
}

void linear_backward(const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND,
                     bool accumulate_dx, Tensor& dw_OD) {
  MOET_CHECK(w_OD.ndim == 2, "linear weight must be 2-D, got ", w_OD.shape_str());
  const int64_t O = w_OD.size(0), D = w_OD.size(1), N = rows_of(x_ND);
  MOET_CHECK(x_ND.size(-1) == D && dy_NO.size(-1) == O && rows_of(dy_NO) == N, "linear bwd: x ",
             x_ND.shape_str(), " w ", w_OD.shape_str(), " dy ", dy_NO.shape_str());
  MOET_CHECK(dx_ND.empty() || dx_ND.numel() == N * D, "linear bwd dx ", dx_ND.shape_str());
  MOET_CHECK(dw_OD.empty() || dw_OD.numel() == O * D, "linear bwd dw ", dw_OD.shape_str());
  check_dtype(dy_NO.dtype, {&x_ND, &w_OD, &dx_ND, &dw_OD});
  dispatch_float(dy_NO.dtype, [&](auto t0) {
    using T = decltype(t0);
    if (!dx_ND.empty())
      blas_gemm(false, false, N, D, O, T(1), dy_NO.data<T>(), O, w_OD.data<T>(), D,
                T(accumulate_dx ? 1 : 0), dx_ND.data<T>(), D);
    if (!dw_OD.empty())
      blas_gemm(true, false, O, D, N, T(1), dy_NO.data<T>(), O, x_ND.data<T>(), D, T(1),
                dw_OD.data<T>(), D);
  });
}

namespace {
// part holds S arrays of n values; afterwards part[0..n) is their sum in the canonical pairwise
// tree order of parallel/communicator.h (split at the largest power of two below the count).
template <typename T>
void tree_sum_rows(T* part, int64_t S, int64_t n) {
  if (S <= 1) return;
  int64_t half = 1;
  while (half * 2 < S) half *= 2;
  tree_sum_rows(part, half, n);
  tree_sum_rows(part + half * n, S - half, n);
  const T* b = part + half * n;
  for (int64_t i = 0; i < n; ++i) part[i] += b[i];
}

// Validates offsets (I32, E+1 entries, 0 .. M, non-decreasing); returns E.
int64_t check_offsets(const Tensor& offsets_E1, int64_t M) {
  check_i32(offsets_E1);
  const int64_t E = offsets_E1.numel() - 1;
  MOET_CHECK(E >= 1, "grouped linear: offsets need E+1 >= 2 entries");
  const int32_t* off = offsets_E1.i32();
  MOET_CHECK(off[0] == 0 && off[E] == M, "grouped linear: offsets must run from 0 to M=", M,
             ", got ", off[0], " .. ", off[E]);
  for (int64_t e = 0; e < E; ++e)
    MOET_CHECK(off[e] <= off[e + 1], "grouped linear: offsets decrease at expert ", e);
  return E;
}
}  // namespace

// One GEMM per non-empty expert on its contiguous row slice; the GEMM itself is multi-threaded.
void grouped_linear_forward(const Tensor& x_MD, const Tensor& offsets_E1, const Tensor& w_EOD,
                            Tensor& y_MO, int64_t segments_per_expert) {
  const int64_t M = rows_of(x_MD), D = x_MD.size(-1), O = y_MO.size(-1);
  const int64_t S = segments_per_expert, G = check_offsets(offsets_E1, M);
  MOET_CHECK(S >= 1 && G % S == 0, "grouped linear: ", G, " segments for ", S, " per expert");
  const int64_t E = G / S;
  MOET_CHECK(rows_of(y_MO) == M && w_EOD.numel() == E * O * D &&
                 (w_EOD.ndim != 3 || (w_EOD.size(1) == O && w_EOD.size(2) == D)),
             "grouped linear: x ", x_MD.shape_str(), " w ", w_EOD.shape_str(), " y ",
             y_MO.shape_str(), " E=", E);
  check_dtype(y_MO.dtype, {&x_MD, &w_EOD});
  const int32_t* off = offsets_E1.i32();
  dispatch_float(y_MO.dtype, [&](auto t0) {
    using T = decltype(t0);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r0 = off[g], r = off[g + 1] - off[g], e = g / S;
      if (r == 0) continue;
      blas_gemm(false, true, r, O, D, T(1), x_MD.data<T>() + r0 * D, D, w_EOD.data<T>() + e * O * D,
                D, T(0), y_MO.data<T>() + r0 * O, O);
    }
  });
}

void grouped_linear_backward(const Tensor& dy_MO, const Tensor& x_MD, const Tensor& offsets_E1,
                             const Tensor& w_EOD, Tensor& dx_MD, Tensor& dw_EOD,
                             int64_t segments_per_expert) {
  const int64_t M = rows_of(x_MD), D = x_MD.size(-1), O = dy_MO.size(-1);
  const int64_t S = segments_per_expert, G = check_offsets(offsets_E1, M);
  MOET_CHECK(S >= 1 && G % S == 0, "grouped linear bwd: ", G, " segments for ", S, " per expert");
  const int64_t E = G / S;
  MOET_CHECK(rows_of(dy_MO) == M && w_EOD.numel() == E * O * D &&
                 (w_EOD.ndim != 3 || (w_EOD.size(1) == O && w_EOD.size(2) == D)),
             "grouped linear bwd: x ", x_MD.shape_str(), " w ", w_EOD.shape_str(), " dy ",
             dy_MO.shape_str(), " E=", E);
  MOET_CHECK(dx_MD.empty() || dx_MD.numel() == M * D, "grouped linear bwd dx ", dx_MD.shape_str());
  MOET_CHECK(dw_EOD.empty() || dw_EOD.numel() == E * O * D, "grouped linear bwd dw ",
             dw_EOD.shape_str());
  check_dtype(dy_MO.dtype, {&x_MD, &w_EOD, &dx_MD, &dw_EOD});
  const int32_t* off = offsets_E1.i32();
  dispatch_float(dy_MO.dtype, [&](auto t0) {
    using T = decltype(t0);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r0 = off[g], r = off[g + 1] - off[g], e = g / S;
      if (r == 0 || dx_MD.empty()) continue;
      blas_gemm(false, false, r, D, O, T(1), dy_MO.data<T>() + r0 * O, O,
                w_EOD.data<T>() + e * O * D, D, T(0), dx_MD.data<T>() + r0 * D, D);
    }
    if (dw_EOD.empty()) return;
    // Weight gradients: one GEMM per segment; with several segments per expert (one per source
    // rank under expert parallelism) the segments' gradients are summed in the canonical tree
    // order, so the result does not depend on how experts are spread over ranks.
    T* part = S > 1 ? scratch<T>(size_t(S * O * D), 2) : nullptr;
    for (int64_t e = 0; e < E; ++e) {
      T* dw = dw_EOD.data<T>() + e * O * D;
      auto segment_grad = [&](int64_t g, T* out, T beta) {
        const int64_t r0 = off[g], r = off[g + 1] - off[g];
        if (r == 0) {
          if (beta == T(0)) std::fill_n(out, O * D, T(0));
          return;
        }
        blas_gemm(true, false, O, D, r, T(1), dy_MO.data<T>() + r0 * O, O,
                  x_MD.data<T>() + r0 * D, D, beta, out, D);
      };
      if (S == 1) {
        segment_grad(e, dw, T(1));
        continue;
      }
      for (int64_t s = 0; s < S; ++s) segment_grad(e * S + s, part + s * O * D, T(0));
      tree_sum_rows(part, S, O * D);  // part[0] = canonical sum of the S parts
      const T* sum = part;
      for (int64_t i = 0; i < O * D; ++i) dw[i] += sum[i];
    }
  });
}

}  // namespace moet::ops
