// embedding_loss.cpp — token embedding (gather / scatter-add) and softmax cross-entropy.
#include <algorithm>

#include "kernels/cpu/common.h"
#include "kernels/cpu/emit.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {
constexpr int64_t kColBlock = 64;  // embedding backward: columns per task

void check_tokens(const Tensor& tokens_N, int64_t V) {
  check_i32(tokens_N);
  const int32_t* t = tokens_N.i32();
  for (int64_t n = 0; n < tokens_N.numel(); ++n)
    MOET_CHECK(t[n] >= 0 && t[n] < V, "token id ", t[n], " at position ", n,
               " is outside the vocabulary [0, ", V, ")");
}
}  // namespace

void embedding_forward(const Tensor& tokens_N, const Tensor& table_VD, Tensor& out_ND) {
  embedding_part_forward(tokens_N, table_VD, 0, table_VD.size(0), out_ND);
}

void embedding_backward(const Tensor& tokens_N, const Tensor& dout_ND, Tensor& dtable_VD) {
  embedding_part_backward(tokens_N, dout_ND, 0, dtable_VD.size(0), dtable_VD);
}

void embedding_part_forward(const Tensor& tokens_N, const Tensor& table_VD, int64_t first,
                            int64_t vocab, Tensor& out_ND) {
  OpScope op_scope("embedding", 0, 2.0 * double(out_ND.bytes()));
  const int64_t V = table_VD.size(0), D = table_VD.size(-1), N = tokens_N.numel();
  MOET_CHECK(table_VD.ndim == 2 && out_ND.numel() == N * D && out_ND.size(-1) == D && first >= 0 &&
                 first + V <= vocab,
             "embedding: tokens ", tokens_N.shape_str(), " table ", table_VD.shape_str(), " out ",
             out_ND.shape_str(), " rows from ", first, " of ", vocab);
  check_dtype(table_VD.dtype, {&out_ND});
  check_tokens(tokens_N, vocab);
  const int32_t* tok = tokens_N.i32();
  dispatch_float(table_VD.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* tab = table_VD.data<T>();
    T* out = out_ND.data<T>();
#pragma omp parallel for schedule(static) if (N * D > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = int64_t(tok[n]) - first;
      if (row >= 0 && row < V)
        std::copy_n(tab + row * D, D, out + n * D);
      else
        std::fill_n(out + n * D, D, -T(0));  // x + (−0) = x for every x, +0 included
    }
  });
}

// Parallel over fixed column blocks; each block walks the tokens in order, so repeated tokens
// accumulate in token order whatever the thread count.
void embedding_part_backward(const Tensor& tokens_N, const Tensor& dout_ND, int64_t first,
                             int64_t vocab, Tensor& dtable_VD) {
  OpScope op_scope("embedding", 0, 3.0 * double(dout_ND.bytes()));
  const int64_t V = dtable_VD.size(0), D = dtable_VD.size(-1), N = tokens_N.numel();
  MOET_CHECK(dtable_VD.ndim == 2 && dout_ND.numel() == N * D && dout_ND.size(-1) == D &&
                 first >= 0 && first + V <= vocab,
             "embedding bwd: tokens ", tokens_N.shape_str(), " dtable ", dtable_VD.shape_str(),
             " dout ", dout_ND.shape_str(), " rows from ", first, " of ", vocab);
  check_dtype(dtable_VD.dtype, {&dout_ND});
  check_tokens(tokens_N, vocab);
  const int32_t* tok = tokens_N.i32();
  dispatch_float(dtable_VD.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* dout = dout_ND.data<T>();
    T* dtab = dtable_VD.data<T>();
    const int64_t nblocks = (D + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * D > kParallelMin)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t j0 = blk * kColBlock, j1 = std::min(D, j0 + kColBlock);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t row = int64_t(tok[n]) - first;
        if (row < 0 || row >= V) continue;
        T* dst = dtab + row * D;
        const T* src = dout + n * D;
        for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
      }
    }
  });
}

namespace {

void check_ce(const Tensor& logits_NV, const Tensor& targets_N, const Tensor& lse_N) {
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  MOET_CHECK(targets_N.numel() == N && lse_N.numel() == N, "cross_entropy: logits ",
             logits_NV.shape_str(), " targets ", targets_N.shape_str(), " lse ", lse_N.shape_str());
  check_i32(targets_N);
  check_dtype(logits_NV.dtype, {&lse_N});
  const int32_t* tgt = targets_N.i32();
  for (int64_t n = 0; n < N; ++n)
    MOET_CHECK(tgt[n] < V, "target ", tgt[n], " at row ", n, " is outside the vocabulary [0, ", V,
               ")");
}

// One row's m = max, lse = m + log Σ exp(x − m) (the sum in double), into `lse`; returns its loss
// lse − x[t] (0 for an ignored row, t < 0).
template <typename T>
double row_lse(const T* x, int64_t V, int32_t t, T& lse) {
  T m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 1; j < V; ++j) m = std::max(m, x[j]);
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < V; ++j) s += double(exp_fast(x[j] - m));
  const double l = double(m) + std::log(s);
  lse = T(l);
  return t < 0 ? 0.0 : l - double(x[t]);
}

// One row's gradient in place: g · (exp(x − lse) − onehot(t)).
template <typename T>
void row_gradient(T* x, int64_t V, int32_t t, T lse, T g) {
#pragma omp simd
  for (int64_t j = 0; j < V; ++j) x[j] = g * exp_fast(x[j] - lse);
  x[t] -= g;
}

}  // namespace

// Per row: m = max, lse = m + log Σ exp(x - m) (sum in double); loss = lse - x[target]. Row
// losses are summed in row order.
double cross_entropy_forward(const Tensor& logits_NV, const Tensor& targets_N, Tensor& lse_N) {
  OpScope op_scope("cross-entropy", 0, double(logits_NV.bytes()));
  check_ce(logits_NV, targets_N, lse_N);
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  const int32_t* tgt = targets_N.i32();
  return dispatch_float(logits_NV.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* lg = logits_NV.data<T>();
    T* lse = lse_N.data<T>();
    double* row_loss = scratch<double>(N);
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
    for (int64_t n = 0; n < N; ++n) row_loss[n] = row_lse(lg + n * V, V, tgt[n], lse[n]);
    double total = 0;
    for (int64_t n = 0; n < N; ++n) total += row_loss[n];
    return total;
  });
}

// dlogits = grad_scale (exp(x - lse) - onehot) in place; rows with a negative target get 0.
void cross_entropy_backward(Tensor& logits_NV, const Tensor& targets_N, const Tensor& lse_N,
                            double grad_scale, const Operand& dq) {
  OpScope op_scope("cross-entropy", 0,
                   2.0 * double(logits_NV.bytes()) + operand_bytes(dq, logits_NV.ptr));
  check_ce(logits_NV, targets_N, lse_N);
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  MOET_CHECK(dq.empty() || logits_NV.dtype == DType::F32, "cross-entropy bwd: operands need F32");
  const int32_t* tgt = targets_N.i32();
  dispatch_float(logits_NV.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* lse = lse_N.data<T>();
    const T g = T(grad_scale);
    produce_rows(N, V, logits_NV.data<T>(), dq, [&](int64_t r0, int64_t r1, T* out) {
      for (int64_t n = r0; n < r1; ++n) {
        T* d = out + (n - r0) * V;
        const int32_t t = tgt[n];
        if (t < 0) {
          std::fill_n(d, V, T(0));
          continue;
        }
        row_gradient(d, V, t, lse[n], g);
      }
    });
  });
}

void cross_entropy_part_sums(const Tensor& logits_NV, const Tensor& max_N, int64_t pieces,
                             double* sums_PN) {
  OpScope op_scope("cross-entropy", 0, double(logits_NV.bytes()));
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  MOET_CHECK(logits_NV.dtype == DType::F32 && max_N.dtype == DType::F32 && max_N.numel() == N &&
                 pieces > 0 && V % pieces == 0,
             "cross-entropy part sums: logits ", logits_NV.shape_str(), " max ", max_N.shape_str(),
             " pieces ", pieces);
  const float* lg = logits_NV.f32();
  const float* m = max_N.f32();
  const int64_t W = V / pieces;
#pragma omp parallel for schedule(static) if (N * V > kParallelMin)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < pieces; ++p) {
      const float* x = lg + n * V + p * W;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < W; ++j) s += double(exp_fast(x[j] - m[n]));
      sums_PN[p * N + n] = s;
    }
}

void cross_entropy_part_backward(Tensor& logits_NV, const Tensor& targets_N, int64_t first,
                                 const Tensor& lse_N, double grad_scale, const Operand& dq) {
  OpScope op_scope("cross-entropy", 0,
                   2.0 * double(logits_NV.bytes()) + operand_bytes(dq, logits_NV.ptr));
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  MOET_CHECK(logits_NV.dtype == DType::F32 && lse_N.dtype == DType::F32 && lse_N.numel() == N &&
                 targets_N.numel() == N,
             "cross-entropy part bwd: logits ", logits_NV.shape_str(), " lse ", lse_N.shape_str(),
             " targets ", targets_N.shape_str());
  check_i32(targets_N);
  const int32_t* tgt = targets_N.i32();
  const float* lse = lse_N.f32();
  const float g = float(grad_scale);
  produce_rows(N, V, logits_NV.f32(), dq, [&](int64_t r0, int64_t r1, float* out) {
    for (int64_t n = r0; n < r1; ++n) {
      float* d = out + (n - r0) * V;
      const int64_t t = tgt[n];
      if (t < 0) {
        std::fill_n(d, V, 0.f);
        continue;
      }
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) d[j] = g * exp_fast(d[j] - lse[n]);
      if (t >= first && t < first + V) d[t - first] -= g;
    }
  });
}

// Per row, while it is in cache: forward's m, lse and loss, then backward's gradient from them —
// the same arithmetic as the two calls in a row, with one trip of the logits through memory.
double cross_entropy_fused(Tensor& logits_NV, const Tensor& targets_N, Tensor& lse_N,
                           double grad_scale, const Operand& dq) {
  OpScope op_scope("cross-entropy", 0,
                   2.0 * double(logits_NV.bytes()) + operand_bytes(dq, logits_NV.ptr));
  check_ce(logits_NV, targets_N, lse_N);
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  MOET_CHECK(dq.empty() || logits_NV.dtype == DType::F32, "cross-entropy: operands need F32");
  const int32_t* tgt = targets_N.i32();
  return dispatch_float(logits_NV.dtype, [&](auto t0) {
    using T = decltype(t0);
    T* lse = lse_N.data<T>();
    double* row_loss = scratch<double>(N);
    const T g = T(grad_scale);
    produce_rows(N, V, logits_NV.data<T>(), dq, [&](int64_t r0, int64_t r1, T* out) {
      for (int64_t n = r0; n < r1; ++n) {
        T* x = out + (n - r0) * V;
        const int32_t t = tgt[n];
        row_loss[n] = row_lse(x, V, t, lse[n]);
        if (t < 0) {
          std::fill_n(x, V, T(0));
          continue;
        }
        row_gradient(x, V, t, lse[n], g);
      }
    });
    double total = 0;
    for (int64_t n = 0; n < N; ++n) total += row_loss[n];
    return total;
  });
}

double cross_entropy(const Tensor& logits_NV, const Tensor& targets_N, double grad_scale,
                     Tensor& dlogits_NV) {
  const int64_t V = logits_NV.size(-1), N = rows_of(logits_NV);
  MOET_CHECK(dlogits_NV.empty() || dlogits_NV.numel() == N * V, "cross_entropy: logits ",
             logits_NV.shape_str(), " dlogits ", dlogits_NV.shape_str());
  check_dtype(logits_NV.dtype, {&dlogits_NV});
  return dispatch_float(logits_NV.dtype, [&](auto t0) {
    using T = decltype(t0);
    Tensor lse(scratch<T>(size_t(N), 1), logits_NV.dtype, {N});
    const double loss = cross_entropy_forward(logits_NV, targets_N, lse);
    if (!dlogits_NV.empty()) {
      if (dlogits_NV.ptr != logits_NV.ptr) copy(logits_NV, dlogits_NV);
      cross_entropy_backward(dlogits_NV, targets_N, lse, grad_scale);
    }
    return loss;
  });
}

}  // namespace moet::ops
