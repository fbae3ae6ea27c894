// norm_act.cpp — RMSNorm and SwiGLU, forward and backward.
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/common.h"
#include "kernels/cpu/emit.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {
constexpr int64_t kColBlock = 64;  // rmsnorm dw: columns per task (fixed, so thread-independent)
}

namespace {

// An Operand a producer writes: only F32 outputs have one (F64 runs in tests without).
void check_operand(const Operand& q, DType t, int64_t numel, const char* what) {
  MOET_CHECK(q.empty() || t == DType::F32, what, ": operands need F32 tensors");
  for (const Tensor* x : {&q.rows, &q.cols})
    MOET_CHECK(x->empty() || x->numel() == numel, what, ": operand ", x->shape_str(), " for ",
               numel, " elements");
}

}  // namespace

void rmsnorm_forward(const Tensor& x_ND, const Tensor& w_D, double eps, Tensor& y_ND,
                     Tensor& rstd_N, const Operand& yq) {
  OpScope op_scope(
      "rmsnorm", 0,
      double(x_ND.bytes() + (y_ND.empty() ? 0 : y_ND.bytes())) + operand_bytes(yq, y_ND.ptr));
  const int64_t D = x_ND.size(-1), N = rows_of(x_ND);
  MOET_CHECK(w_D.numel() == D && y_ND.numel() == N * D && (rstd_N.empty() || rstd_N.numel() == N),
             "rmsnorm: x ", x_ND.shape_str(), " w ", w_D.shape_str(), " y ", y_ND.shape_str(),
             " rstd ", rstd_N.shape_str());
  check_dtype(x_ND.dtype, {&w_D, &y_ND, &rstd_N});
  check_operand(yq, x_ND.dtype, N * D, "rmsnorm");
  dispatch_float(x_ND.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* x = x_ND.data<T>();
    const T* w = w_D.data<T>();
    T* y = y_ND.data<T>();
    T* rs = rstd_N.empty() ? nullptr : rstd_N.data<T>();
    auto rows = [&](int64_t r0, int64_t r1, T* out) {
      for (int64_t n = r0; n < r1; ++n) {
        const T* xr = x + n * D;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int64_t j = 0; j < D; ++j) ss += double(xr[j]) * double(xr[j]);
        const T r = T(1.0 / std::sqrt(ss / double(D) + eps));
        if (rs) rs[n] = r;
        T* yr = out + (n - r0) * D;
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] * r) * w[j];
      }
    };
    produce_rows(N, D, y, yq, rows);
  });
}

// y = x r w with r = (mean x² + eps)^-1/2:
// dx_j = r w_j dy_j - x_j r³/D Σ_i dy_i w_i x_i;  dw_j += Σ_n dy_nj x_nj r_n.
void rmsnorm_backward(const Tensor& dy_ND, const Tensor& x_ND, const Tensor& w_D,
                      const Tensor& rstd_N, Tensor& dx_ND, bool accumulate_dx, Tensor& dw_D,
                      const Operand& dxq) {
  OpScope op_scope(
      "rmsnorm", 0,
      double(2 * x_ND.bytes() + (dx_ND.empty() ? 0 : (accumulate_dx ? 2 : 1) * dx_ND.bytes())) +
          operand_bytes(dxq, dx_ND.ptr));
  const int64_t D = x_ND.size(-1), N = rows_of(x_ND);
  MOET_CHECK(w_D.numel() == D && dy_ND.numel() == N * D && rstd_N.numel() == N &&
                 (dx_ND.ndim == 0 || dx_ND.numel() == N * D) && (dw_D.empty() || dw_D.numel() == D),
             "rmsnorm bwd: x ", x_ND.shape_str(), " dy ", dy_ND.shape_str(), " rstd ",
             rstd_N.shape_str());
  check_dtype(x_ND.dtype, {&dy_ND, &w_D, &rstd_N, &dx_ND, &dw_D});
  MOET_CHECK(dxq.empty() || dx_ND.numel() == N * D, "rmsnorm bwd: operands of dx without dx");
  MOET_CHECK(!accumulate_dx || !dx_ND.empty(), "rmsnorm bwd: accumulating into dx without memory");
  check_operand(dxq, x_ND.dtype, N * D, "rmsnorm bwd");
  dispatch_float(x_ND.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* x = x_ND.data<T>();
    const T* dy = dy_ND.data<T>();
    const T* w = w_D.data<T>();
    const T* rs = rstd_N.data<T>();
    if (!dx_ND.empty() || !dxq.empty()) {
      produce_rows(N, D, dx_ND.data<T>(), dxq, [&](int64_t r0, int64_t r1, T* out) {
        for (int64_t n = r0; n < r1; ++n) {
          const T* xr = x + n * D;
          const T* dyr = dy + n * D;
          T* dxr = out + (n - r0) * D;
          double dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t j = 0; j < D; ++j) dot += double(dyr[j]) * double(w[j]) * double(xr[j]);
          const double r = rs[n];
          const T a = T(r), c = T(dot * r * r * r / double(D));
          if (accumulate_dx) {
#pragma omp simd
            for (int64_t j = 0; j < D; ++j) dxr[j] += a * w[j] * dyr[j] - c * xr[j];
          } else {
#pragma omp simd
            for (int64_t j = 0; j < D; ++j) dxr[j] = a * w[j] * dyr[j] - c * xr[j];
          }
        }
      });
    }
    if (!dw_D.empty()) {
      T* dw = dw_D.data<T>();
      const int64_t nblocks = (D + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * D > kParallelMin)
      for (int64_t blk = 0; blk < nblocks; ++blk) {
        const int64_t j0 = blk * kColBlock, j1 = std::min(D, j0 + kColBlock);
        double acc[kColBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const double r = rs[n];
          for (int64_t j = j0; j < j1; ++j) acc[j - j0] += double(dy[n * D + j]) * x[n * D + j] * r;
        }
        for (int64_t j = j0; j < j1; ++j) dw[j] += T(acc[j - j0]);
      }
    }
  });
}

void swiglu_forward(const Tensor& gu_N2F, Tensor& h_NF, const Operand& hq) {
  OpScope op_scope(
      "swiglu", 0,
      double(gu_N2F.bytes() + (h_NF.empty() ? 0 : h_NF.bytes())) + operand_bytes(hq, h_NF.ptr));
  const int64_t F = gu_N2F.size(-1) / 2, N = rows_of(gu_N2F);
  MOET_CHECK(
      gu_N2F.size(-1) == 2 * F && (h_NF.empty() || (h_NF.size(-1) == F && rows_of(h_NF) == N)),
      "swiglu: gu ", gu_N2F.shape_str(), " h ", h_NF.shape_str());
  MOET_CHECK(!h_NF.empty() || !hq.empty(), "swiglu: no output");
  check_dtype(gu_N2F.dtype, {&h_NF});
  check_operand(hq, gu_N2F.dtype, N * F, "swiglu");
  dispatch_float(gu_N2F.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* gu = gu_N2F.data<T>();
    T* h = h_NF.empty() ? nullptr : h_NF.data<T>();
    produce_rows(N, F, h, hq, [&](int64_t r0, int64_t r1, T* out) {
      for (int64_t n = r0; n < r1; ++n) {
        const T* g = gu + n * 2 * F;
        const T* u = g + F;
        T* hr = out + (n - r0) * F;
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) hr[j] = g[j] * sigmoid(g[j]) * u[j];
      }
    });
  });
}

// h = g σ(g) u:  dg = dh u σ(g) (1 + g (1 - σ(g))),  du = dh g σ(g).
void swiglu_backward(const Tensor& dh_NF, const Tensor& gu_N2F, Tensor& dgu_N2F,
                     const Operand& dguq) {
  OpScope op_scope(
      "swiglu", 0,
      double(dh_NF.bytes() + gu_N2F.bytes() + (dgu_N2F.empty() ? 0 : dgu_N2F.bytes())) +
          operand_bytes(dguq, dgu_N2F.ptr));
  const int64_t F = dh_NF.size(-1), N = rows_of(dh_NF);
  MOET_CHECK(gu_N2F.size(-1) == 2 * F && rows_of(gu_N2F) == N && dgu_N2F.numel() == N * 2 * F,
             "swiglu bwd: dh ", dh_NF.shape_str(), " gu ", gu_N2F.shape_str(), " dgu ",
             dgu_N2F.shape_str());
  check_dtype(dh_NF.dtype, {&gu_N2F, &dgu_N2F});
  check_operand(dguq, dh_NF.dtype, N * 2 * F, "swiglu bwd");
  dispatch_float(dh_NF.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* gu = gu_N2F.data<T>();
    const T* dh = dh_NF.data<T>();
    produce_rows(N, 2 * F, dgu_N2F.data<T>(), dguq, [&](int64_t r0, int64_t r1, T* out) {
      for (int64_t n = r0; n < r1; ++n) {
        const T* g = gu + n * 2 * F;
        const T* u = g + F;
        const T* d = dh + n * F;
        T* dg = out + (n - r0) * 2 * F;
        T* du = dg + F;
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) {
          const T s = sigmoid(g[j]);
          const T gj = g[j], uj = u[j], dj = d[j];  // read before write: dgu may alias gu
          dg[j] = dj * uj * s * (T(1) + gj * (T(1) - s));
          du[j] = dj * gj * s;
        }
      }
    });
  });
}

}  // namespace moet::ops
