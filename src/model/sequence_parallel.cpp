#include "model/sequence_parallel.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/tree_sum.h"

namespace moet {

namespace {

// The parts' shards side by side ([P, B, T/P, C], as the group's collectives lay them) from a
// tensor in sequence order ([B, T, C]), or back.
void to_part_major(const float* seq, float* parts, int64_t P, int64_t B, int64_t T, int64_t C,
                   bool back) {
  const int64_t Tl = T / P, run = Tl * C;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s = (b * T + p * Tl) * C, q = (p * B + b) * run;
      if (back)
        std::memcpy(const_cast<float*>(seq) + s, parts + q, size_t(run) * sizeof(float));
      else
        std::memcpy(parts + q, seq + s, size_t(run) * sizeof(float));
    }
}

float* grow(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

// B for a shard or a whole tensor of `rows` rows.
int64_t sequences(const TensorParallel& tp, int64_t rows, bool shard) {
  const int64_t per = shard ? tp.seq_len / tp.parts : tp.seq_len;
  MOET_ASSERT(tp.seq_len > 0 && tp.seq_len % tp.parts == 0 && rows % per == 0);
  return rows / per;
}

}  // namespace

bool token_pieces(const TensorParallel& tp) {
  return tp.invariant && tp.seq_len > 0 && tp.seq_len % kTokenPieces == 0 &&
         kTokenPieces % tp.parts == 0;
}

void sp_gather(const TensorParallel& tp, const Tensor& local_ND, Tensor& full_ND) {
  MOET_ASSERT(tp.sequence_parallel && tp.group && local_ND.dtype == DType::F32 &&
              full_ND.dtype == DType::F32 && full_ND.numel() == local_ND.numel() * tp.parts);
  const int64_t B = sequences(tp, local_ND.size(0), true), C = local_ND.numel() / local_ND.size(0);
  if (B == 1) return tp.group->gather(local_ND.ptr, local_ND.bytes(), full_ND.ptr);
  thread_local std::vector<float> parts;
  float* buf = grow(parts, full_ND.numel());
  tp.group->gather(local_ND.ptr, local_ND.bytes(), buf);
  to_part_major(full_ND.f32(), buf, tp.parts, B, tp.seq_len, C, true);
}

void sp_gather_input(const TensorParallel& tp, const Tensor& local_ND, const GemmInput& full,
                     Tensor& staging_ND) {
  if (full.q.empty()) {
    Tensor values = full.values;
    return sp_gather(tp, local_ND, values);
  }
  // the values the operands are made from: the input's own memory, unless it has none or is the
  // operands' rows (made in place)
  const bool own = !full.values.empty() && full.values.ptr != full.q.rows.ptr;
  Tensor values = own ? full.values : staging_ND;
  sp_gather(tp, local_ND, values);
  ops::quantize_operand(values, full.q);
}

void sp_sum_scatter(const TensorParallel& tp, Tensor& partial_ND, Tensor& local_ND,
                    bool accumulate) {
  MOET_ASSERT(tp.sequence_parallel && tp.group && partial_ND.dtype == DType::F32 &&
              partial_ND.numel() == local_ND.numel() * tp.parts);
  const int64_t n = partial_ND.numel(), B = sequences(tp, partial_ND.size(0), false),
                C = n / partial_ND.size(0);
  thread_local std::vector<float> parts;
  float* x = partial_ND.f32();
  if (B > 1) {
    x = grow(parts, n);
    to_part_major(partial_ND.f32(), x, tp.parts, B, tp.seq_len, C, false);
  }
  tp.group->sum_scatter(x, n);
  const Tensor mine(x + n / tp.parts * tp.part, DType::F32, {local_ND.size(0), C});
  if (accumulate)
    ops::add(local_ND, mine, local_ND);
  else
    ops::copy(mine, local_ND);
}

void sp_shard(const TensorParallel& tp, const Tensor& full_ND, Tensor& local_ND, bool accumulate) {
  MOET_ASSERT(tp.sequence_parallel && full_ND.numel() == local_ND.numel() * tp.parts);
  const int64_t B = sequences(tp, full_ND.size(0), false), Tl = tp.seq_len / tp.parts;
  for (int64_t b = 0; b < B; ++b) {
    const Tensor from =
        full_ND.rows(b * tp.seq_len + tp.part * Tl, b * tp.seq_len + (tp.part + 1) * Tl);
    Tensor to = local_ND.rows(b * Tl, (b + 1) * Tl);
    if (accumulate)
      ops::add(to, from, to);
    else
      ops::copy(from, to);
  }
}

void norm_backward(const TensorParallel& tp, const Tensor& dy_ND, const Tensor& x_ND,
                   const Tensor& w_D, const Tensor& rstd_N, Tensor& dx_ND, bool accumulate_dx,
                   Tensor& dw_D, const ops::Operand& dxq) {
  const bool pieces = token_pieces(tp), shard = tp.sequence_parallel && tp.parts > 1;
  if (!pieces && !shard)
    return ops::rmsnorm_backward(dy_ND, x_ND, w_D, rstd_N, dx_ND, accumulate_dx, dw_D, dxq);
  const int64_t D = w_D.numel(), rows = x_ND.size(0);
  // this part's pieces of each sequence (one piece of all its rows without token pieces)
  const int64_t shards = shard ? tp.parts : 1, T = tp.seq_len / shards;
  const int64_t count = pieces ? kTokenPieces / shards : 1, len = pieces ? T / count : rows;
  const int64_t B = pieces ? rows / T : 1;
  MOET_ASSERT(!pieces || rows % T == 0);
  thread_local std::vector<float> partial;
  float* g = grow(partial, count * D);
  std::fill(g, g + count * D, 0.f);
  for (int64_t p = 0; p < count; ++p) {
    Tensor g_p(g + p * D, DType::F32, {D});
    for (int64_t b = 0; b < B; ++b) {
      const int64_t r0 = b * (pieces ? T : 0) + p * len, r1 = r0 + len;
      Tensor dx = dx_ND.rows(r0, r1);
      ops::rmsnorm_backward(dy_ND.rows(r0, r1), x_ND.rows(r0, r1), w_D, rstd_N.rows(r0, r1), dx,
                            accumulate_dx, g_p,
                            dxq.empty() || r1 - r0 == rows ? dxq : dxq.row_range(r0, r1));
    }
  }
  tree_sum_arrays(g, count, D);    // this part's pieces, ((p0 + p1) + (p2 + p3)) …
  if (shard) tp.group->sum(g, D);  // … then the parts' in the same tree
  ops::add(dw_D, Tensor(g, DType::F32, {D}), dw_D);
}

}  // namespace moet
