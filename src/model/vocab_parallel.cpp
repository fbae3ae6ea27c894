#include "model/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/tree_sum.h"
#include "model/sequence_parallel.h"

namespace moet {

namespace {
int64_t first_row(const TensorParallel& tp, int64_t local_rows) { return tp.part * local_rows; }
}  // namespace

namespace {
// A [tokens, D] F32 temporary for a sequence-parallel shard's whole (thread-local, grown to fit).
Tensor whole_rows(const Tensor& tokens_N, const Tensor& shard_ND) {
  thread_local std::vector<float> buf;
  const int64_t N = tokens_N.size(0), D = shard_ND.size(1);
  if (buf.size() < size_t(N * D)) buf.resize(size_t(N * D));
  return Tensor(buf.data(), DType::F32, {N, D});
}
}  // namespace

void vocab_parallel_embedding_forward(const TensorParallel& tp, const Tensor& tokens_N,
                                      const Tensor& table_VD, Tensor& out_ND) {
  if (!tp.active()) return ops::embedding_forward(tokens_N, table_VD, out_ND);
  const int64_t V = table_VD.size(0);
  const bool shard = out_ND.size(0) != tokens_N.size(0);  // sequence parallelism: a reduce-scatter
  Tensor all = shard ? whole_rows(tokens_N, out_ND) : out_ND;
  ops::embedding_part_forward(tokens_N, table_VD, first_row(tp, V), V * tp.parts, all);
  if (shard) return sp_sum_scatter(tp, all, out_ND, false);
  if (tp.group) tp.group->sum(out_ND.f32(), out_ND.numel());
}

void vocab_parallel_embedding_backward(const TensorParallel& tp, const Tensor& tokens_N,
                                       const Tensor& dout_ND, Tensor& dtable_VD) {
  if (!tp.active()) return ops::embedding_backward(tokens_N, dout_ND, dtable_VD);
  const int64_t V = dtable_VD.size(0);
  Tensor all = dout_ND;
  if (dout_ND.size(0) != tokens_N.size(0)) {  // sequence parallelism: every part's tokens
    all = whole_rows(tokens_N, dout_ND);
    sp_gather(tp, dout_ND, all);
  }
  ops::embedding_part_backward(tokens_N, all, first_row(tp, V), V * tp.parts, dtable_VD);
}

double vocab_parallel_cross_entropy(const TensorParallel& tp, Tensor& logits_NV,
                                    const Tensor& targets_N, Tensor& lse_N, bool gradient,
                                    double grad_scale, const ops::Operand& dq) {
  const int64_t N = logits_NV.size(0), V = logits_NV.size(1), first = first_row(tp, V);
  const int64_t pieces = tp.invariant ? TensorParallel::kPieces / tp.parts : 1;
  MOET_CHECK(V % pieces == 0, "vocabulary part ", V, " does not divide into ", pieces, " pieces");
  thread_local std::vector<float> maxima;
  thread_local std::vector<double> sums;
  maxima.assign(size_t(N * tp.parts), 0.f);
  sums.assign(size_t((pieces + 1) * N), 0.0);
  // each row's maximum over the whole vocabulary (exact in any order)
  const float* lg = logits_NV.f32();
  for (int64_t n = 0; n < N; ++n)
    maxima[size_t(n)] = *std::max_element(lg + n * V, lg + (n + 1) * V);
  if (tp.group) {
    thread_local std::vector<float> mine;  // reused: a step allocates nothing
    mine.assign(maxima.begin(), maxima.begin() + N);
    tp.group->gather(mine.data(), N * int64_t(sizeof(float)), maxima.data());
    for (int64_t p = 1; p < tp.parts; ++p)
      for (int64_t n = 0; n < N; ++n)
        maxima[size_t(n)] = std::max(maxima[size_t(n)], maxima[size_t(p * N + n)]);
  }
  const Tensor max_N(maxima.data(), DType::F32, {N});
  ops::cross_entropy_part_sums(logits_NV, max_N, pieces, sums.data());
  tree_sum_arrays(sums.data(), pieces, N);  // ((p0 + p1) + (p2 + p3)) per row
  // after the row sums, each row's target logit (from the part that holds it; 0 elsewhere)
  double* target_logit = sums.data() + pieces * N;
  const int32_t* t = targets_N.i32();
  for (int64_t n = 0; n < N; ++n)
    if (t[n] >= first && t[n] < first + V) target_logit[n] = double(lg[n * V + t[n] - first]);
  if (tp.group) {
    std::copy_n(target_logit, N, sums.data() + N);  // rows' sums in [0, N), logits in [N, 2N)
    tp.group->sum(sums.data(), 2 * N);
    target_logit = sums.data() + N;
  }
  double total = 0;
  float* lse = lse_N.f32();
  for (int64_t n = 0; n < N; ++n) {
    const double l = double(maxima[size_t(n)]) + std::log(sums[size_t(n)]);
    lse[n] = float(l);
    if (t[n] >= 0) total += l - target_logit[n];
  }
  if (gradient)
    vocab_parallel_cross_entropy_backward(tp, logits_NV, targets_N, lse_N, grad_scale, dq);
  return total;
}

void vocab_parallel_cross_entropy_backward(const TensorParallel& tp, Tensor& logits_NV,
                                           const Tensor& targets_N, const Tensor& lse_N,
                                           double grad_scale, const ops::Operand& dq) {
  ops::cross_entropy_part_backward(logits_NV, targets_N, first_row(tp, logits_NV.size(1)), lse_N,
                                   grad_scale, dq);
}

void gather_vocab(const TensorParallel& tp, const Tensor& local_RV, Tensor& out_RV) {
  const int64_t R = local_RV.size(0), V = local_RV.size(1);
  MOET_ASSERT(out_RV.size(0) == R && out_RV.size(1) == V * tp.parts);
  if (!tp.group) return ops::copy(local_RV, out_RV);
  thread_local std::vector<float> all;
  all.resize(size_t(R * V * tp.parts));
  tp.group->gather(local_RV.f32(), R * V * int64_t(sizeof(float)), all.data());
  for (int64_t p = 0; p < tp.parts; ++p)
    for (int64_t r = 0; r < R; ++r)
      std::copy_n(all.data() + (p * R + r) * V, V, out_RV.f32() + r * V * tp.parts + p * V);
}

}  // namespace moet
