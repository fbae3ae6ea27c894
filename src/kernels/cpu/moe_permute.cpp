// moe_permute.cpp — tokens sorted by expert: the counting-sort plan, the row gather (and its
// backward), and the gate-weighted unpermute (and its backward). Sums run over k in order.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/emit.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

void moe_permute_plan(const Tensor& idx_NK, int64_t n_experts, Tensor& offsets_E1, Tensor& slot_NK,
                      Tensor& token_M) {
  OpScope op_scope("permute", 0, 3.0 * double(idx_NK.bytes()));
  const int64_t E = n_experts, M = idx_NK.numel(), K = idx_NK.ndim >= 2 ? idx_NK.size(-1) : 1;
  MOET_CHECK(E >= 1 && offsets_E1.numel() == E + 1 && slot_NK.numel() == M &&
                 token_M.numel() == M && M < INT32_MAX,
             "moe_permute_plan: idx ", idx_NK.shape_str(), " E ", E, " offsets ",
             offsets_E1.shape_str(), " slot ", slot_NK.shape_str(), " token ", token_M.shape_str());
  check_i32(idx_NK);
  check_i32(offsets_E1);
  check_i32(slot_NK);
  check_i32(token_M);
  const int32_t* idx = idx_NK.i32();
  int32_t* off = offsets_E1.i32();
  int32_t* slot = slot_NK.i32();
  int32_t* token = token_M.i32();
  std::fill_n(off, E + 1, 0);
  for (int64_t i = 0; i < M; ++i) {
    MOET_CHECK(idx[i] >= 0 && idx[i] < E, "expert index ", idx[i], " at ", i, " outside [0, ", E,
               ")");
    ++off[idx[i] + 1];
  }
  for (int64_t e = 0; e < E; ++e) off[e + 1] += off[e];
  int32_t* cursor = scratch<int32_t>(size_t(E), 0);
  std::copy_n(off, E, cursor);
  for (int64_t i = 0; i < M; ++i) {  // (n, k) order: stable within each expert
    const int32_t m = cursor[idx[i]]++;
    slot[i] = m;
    token[m] = int32_t(i / K);
  }
}

void gather_rows(const Tensor& x_ND, const Tensor& token_M, Tensor& xp_MD, const Operand& xpq) {
  OpScope op_scope(
      "permute", 0,
      double(token_M.numel() * x_ND.size(-1) * int64_t(dtype_size(x_ND.dtype)) + xp_MD.bytes()) +
          operand_bytes(xpq));
  const int64_t D = x_ND.size(-1), N = rows_of(x_ND), M = token_M.numel();
  MOET_CHECK(xp_MD.numel() == M * D && xp_MD.size(-1) == D, "gather_rows: x ", x_ND.shape_str(),
             " token ", token_M.shape_str(), " xp ", xp_MD.shape_str());
  check_i32(token_M);
  const DType xt = x_ND.dtype, pt = xp_MD.dtype;
  const bool convert = xt != pt;
  MOET_CHECK(!convert || ((xt == DType::F32 || xt == DType::BF16) &&
                          (pt == DType::F32 || pt == DType::BF16)),
             "gather_rows: ", dtype_name(xt), " rows into ", dtype_name(pt));
  MOET_CHECK(xpq.rows.empty() && (xpq.cols.empty() || xpq.cols.numel() == M * D),
             "gather_rows: xp's operands are its cols copy");
  const int32_t* tok = token_M.i32();
  for (int64_t m = 0; m < M; ++m)
    MOET_CHECK(tok[m] >= 0 && tok[m] < N, "gather_rows: token ", tok[m], " outside [0, ", N, ")");
  const size_t xs = dtype_size(xt), ps = dtype_size(pt);
  const char* x = static_cast<const char*>(x_ND.ptr);
  char* xp = static_cast<char*>(xp_MD.ptr);
  // row m of xp from its token's row, converted where the dtypes differ
  auto put = [&](int64_t m, char* dst) {
    const char* src = x + tok[m] * D * xs;
    if (!convert)
      std::memcpy(dst, src, D * xs);
    else if (pt == DType::F32)
      bf16_to_f32(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<float*>(dst), D);
    else
      f32_to_bf16(reinterpret_cast<const float*>(src), reinterpret_cast<uint16_t*>(dst), D);
  };
  const bool cols = !xpq.cols.empty();
  MOET_CHECK(!cols || xt == DType::F32 || xt == DType::BF16, "gather_rows: operands of ",
             dtype_name(xt), " rows");
  for_each_chunk(M, D, xpq, [&](int64_t r0, int64_t r1) {
    for (int64_t m = r0; m < r1; ++m) put(m, xp + m * D * ps);
    if (!cols) return;
    // the cols copy from the rows' fp32 values: xp itself, or a widened tile
    const float* vals = reinterpret_cast<const float*>(xp + r0 * D * ps);
    if (pt != DType::F32) {
      float* tile = scratch<float>(size_t((r1 - r0) * D), 3);
      for (int64_t m = r0; m < r1; ++m) {
        const char* src = x + tok[m] * D * xs;
        if (xt == DType::F32)
          std::memcpy(tile + (m - r0) * D, src, D * sizeof(float));
        else
          bf16_to_f32(reinterpret_cast<const uint16_t*>(src), tile + (m - r0) * D, D);
      }
      vals = tile;
    }
    emit_rows(xpq, vals, r0, r1, D);
  });
}

namespace {
void check_slots(const Tensor& slot_NK, int64_t M) {
  check_i32(slot_NK);
  const int32_t* s = slot_NK.i32();
  for (int64_t i = 0; i < slot_NK.numel(); ++i)
    MOET_CHECK(s[i] >= 0 && s[i] < M, "slot ", s[i], " at ", i, " outside [0, ", M, ")");
}
}  // namespace

void gather_rows_backward(const Tensor& dxp_MD, const Tensor& slot_NK, Tensor& dx_ND) {
  OpScope op_scope("permute", 0, 2.0 * double(dxp_MD.bytes()));
  const int64_t D = dx_ND.size(-1), N = rows_of(dx_ND), M = rows_of(dxp_MD);
  MOET_CHECK(dxp_MD.size(-1) == D && (N == 0 || slot_NK.numel() % N == 0),
             "gather_rows_backward: dxp ", dxp_MD.shape_str(), " slot ", slot_NK.shape_str(),
             " dx ", dx_ND.shape_str());
  if (N == 0) return;
  const int64_t K = slot_NK.numel() / N;
  check_slots(slot_NK, M);
  check_dtype(dx_ND.dtype, {&dxp_MD});
  const int32_t* slot = slot_NK.i32();
  dispatch_float(dx_ND.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* dxp = dxp_MD.data<T>();
    T* dx = dx_ND.data<T>();
#pragma omp parallel for schedule(static) if (N * K * D > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      T* out = dx + n * D;
      for (int64_t k = 0; k < K; ++k) {
        const T* src = dxp + int64_t(slot[n * K + k]) * D;
        for (int64_t j = 0; j < D; ++j) out[j] += src[j];
      }
    }
  });
}

void unpermute_forward(const Tensor& yp_MD, const Tensor& slot_NK, const Tensor& gates_NK,
                       Tensor& y_ND, bool accumulate) {
  OpScope op_scope("unpermute", 0, 2.0 * double(yp_MD.bytes()));
  const int64_t D = y_ND.size(-1), N = rows_of(y_ND), M = rows_of(yp_MD);
  MOET_CHECK(yp_MD.size(-1) == D && gates_NK.numel() == slot_NK.numel() &&
                 (N == 0 || slot_NK.numel() % N == 0),
             "unpermute: yp ", yp_MD.shape_str(), " slot ", slot_NK.shape_str(), " gates ",
             gates_NK.shape_str(), " y ", y_ND.shape_str());
  if (N == 0) return;
  const int64_t K = slot_NK.numel() / N;
  check_slots(slot_NK, M);
  check_dtype(y_ND.dtype, {&yp_MD, &gates_NK});
  const int32_t* slot = slot_NK.i32();
  dispatch_float(y_ND.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* yp = yp_MD.data<T>();
    const T* g = gates_NK.data<T>();
    T* y = y_ND.data<T>();
#pragma omp parallel for schedule(static) if (N * K * D > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      T* out = y + n * D;
      if (!accumulate) std::fill_n(out, D, T(0));
      for (int64_t k = 0; k < K; ++k) {
        const T gk = g[n * K + k];
        const T* src = yp + int64_t(slot[n * K + k]) * D;
        for (int64_t j = 0; j < D; ++j) out[j] += gk * src[j];
      }
    }
  });
}

void unpermute_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& slot_NK,
                        const Tensor& gates_NK, Tensor& dyp_MD, Tensor& dgates_NK,
                        const Tensor& token_M, const Operand& dypq) {
  OpScope op_scope(
      "unpermute", 0,
      double(yp_MD.bytes() * (dgates_NK.empty() ? 1 : 2) + (dyp_MD.empty() ? 0 : dyp_MD.bytes())) +
          operand_bytes(dypq, dyp_MD.ptr));
  const int64_t D = dy_ND.size(-1), N = rows_of(dy_ND), M = rows_of(yp_MD);
  MOET_CHECK(yp_MD.size(-1) == D && gates_NK.numel() == slot_NK.numel() &&
                 (N == 0 || slot_NK.numel() % N == 0) &&
                 (dyp_MD.empty() || dyp_MD.numel() == M * D) &&
                 (dgates_NK.empty() || dgates_NK.numel() == gates_NK.numel()),
             "unpermute bwd: dy ", dy_ND.shape_str(), " yp ", yp_MD.shape_str(), " slot ",
             slot_NK.shape_str(), " dyp ", dyp_MD.shape_str(), " dgates ", dgates_NK.shape_str());
  MOET_CHECK(dypq.empty() || (token_M.numel() == M && !dyp_MD.empty() && dy_ND.dtype == DType::F32),
             "unpermute bwd: dyp's operands need dyp, F32 and the plan's token_M");
  if (N == 0) return;
  const int64_t K = slot_NK.numel() / N;
  check_slots(slot_NK, M);
  check_dtype(dy_ND.dtype, {&yp_MD, &gates_NK, &dyp_MD, &dgates_NK});
  const int32_t* slot = slot_NK.i32();
  dispatch_float(dy_ND.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* dy = dy_ND.data<T>();
    const T* yp = yp_MD.data<T>();
    const T* g = gates_NK.data<T>();
    T* dyp = dyp_MD.empty() ? nullptr : dyp_MD.data<T>();
    T* dg = dgates_NK.empty() ? nullptr : dgates_NK.data<T>();
    auto dgate = [&](int64_t n, int64_t k, int64_t m) {
      const T* d = dy + n * D;
      const T* src = yp + m * D;
      double dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < D; ++j) dot += double(d[j]) * double(src[j]);
      dg[n * K + k] = T(dot);
    };
    if (!dypq.empty()) {
      // in row order m (token_M[m] = n, the k with slot[n, k] = m): dyp chunk by chunk with its
      // operands, the same products as below
      const int32_t* tok = token_M.i32();
      for (int64_t m = 0; m < M; ++m)
        MOET_CHECK(tok[m] >= 0 && tok[m] < N, "unpermute bwd: token ", tok[m], " outside [0, ", N,
                   ")");
      produce_rows(M, D, dyp, dypq, [&](int64_t r0, int64_t r1, T* out) {
        for (int64_t m = r0; m < r1; ++m) {
          const int64_t n = tok[m];
          int64_t k = 0;
          while (k < K && slot[n * K + k] != m) ++k;
          MOET_ASSERT(k < K);
          const T gk = g[n * K + k];
          const T* d = dy + n * D;
          T* o = out + (m - r0) * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) o[j] = gk * d[j];
          if (dg) dgate(n, k, m);
        }
      });
      return;
    }
#pragma omp parallel for schedule(static) if (N * K * D > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* d = dy + n * D;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t m = slot[n * K + k];
        if (dyp) {
          const T gk = g[n * K + k];
          T* out = dyp + m * D;
          for (int64_t j = 0; j < D; ++j) out[j] = gk * d[j];
        }
        if (dg) dgate(n, k, m);
      }
    }
  });
}

}  // namespace moet::ops
