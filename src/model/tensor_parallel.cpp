#include "model/tensor_parallel.h"

#include <algorithm>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/tree_sum.h"
#include "model/sequence_parallel.h"
#include "model/weight_grads.h"

namespace moet {

int64_t TensorParallel::local(int64_t n, const char* what) const {
  MOET_CHECK(n % parts == 0, what, " ", n, " does not divide over ", parts,
             " tensor-parallel ranks: choose a --tp that divides it");
  MOET_CHECK(!invariant || n % kPieces == 0, what, " ", n, " does not divide into ", kPieces,
             " pieces, which --deterministic tensor parallelism sums apart (every --tp the same "
             "bits): run without --deterministic, or choose a model whose ",
             what, " is a multiple of ", kPieces);
  return n / parts;
}

bool tp_invariant_sums_possible(const ModelConfig& c) {
  auto divides = [](int64_t n) { return n % TensorParallel::kPieces == 0; };
  return divides(c.num_attention_heads) && divides(c.intermediate_size) && divides(c.vocab_size) &&
         (c.n_shared_experts == 0 || divides(c.shared_intermediate_size()));
}

bool tp_invariant_sums(const ModelConfig& c, const PrecisionPolicy& precision) {
  return tp_invariant_sums_possible(c) &&
         (precision.recipe == Recipe::FP32 || precision.recipe == Recipe::BF16);
}

namespace {

// Buffers the invariant sums reuse (grown to fit, so a step like the last allocates nothing).
struct PieceBuffers {
  std::vector<float> a, b;
  std::vector<uint16_t> a16, b16;
  std::vector<float> sums;
};
PieceBuffers& buffers() {
  thread_local PieceBuffers b;
  return b;
}

float* grow(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

// The piece of a_RC along its columns (cols) or rows: of each of `segments` equal blocks of that
// dimension, the `piece`-th of `pieces` equal parts, the blocks' parts side by side — as the GEMM
// multiplies it: fp32, or rounded to bf16 (in the GEMM operand dtype) when fmt is BF16.
Tensor piece_of(const Tensor& a_RC, bool cols, int64_t segments, int64_t piece, int64_t pieces,
                ops::Format fmt, std::vector<float>& f32, std::vector<uint16_t>& b16) {
  const int64_t R = a_RC.size(0), C = a_RC.size(1);
  const int64_t span = (cols ? C : R) / segments, width = span / pieces;
  const int64_t r_out = cols ? R : segments * width, c_out = cols ? segments * width : C;
  float* out = grow(f32, r_out * c_out);
  const bool round = fmt == ops::Format::BF16, from_bf16 = a_RC.dtype == DType::BF16;
  auto put = [&](float* dst, int64_t at, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = from_bf16 ? bf16_to_float(a_RC.bf16()[at + i]) : a_RC.f32()[at + i];
      dst[i] = round ? round_bf16(v) : v;
    }
  };
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t first = s * span + piece * width;
    if (cols) {
      for (int64_t r = 0; r < R; ++r) put(out + r * c_out + s * width, r * C + first, width);
    } else {
      put(out + s * width * C, first * C, width * C);
    }
  }
  if (!round || ops::gemm_operand_dtype() != DType::BF16)
    return Tensor(out, DType::F32, {r_out, c_out});
  if (b16.size() < f32.size()) b16.resize(f32.size());
  for (int64_t i = 0; i < r_out * c_out; ++i) b16[size_t(i)] = bf16_bits(out[i]);
  return Tensor(b16.data(), DType::BF16, {r_out, c_out});
}

// out_MN = Σ over this part's pieces of op(a piece)·op(b piece), added in the pairwise tree over
// pieces, then over the group's parts; = or += as `accumulate`. `a_cols`/`b_cols`: which
// dimension of a and b the reduction runs along (the pieces cut it).
void invariant_sum(const TensorParallel& tp, const Tensor& a, bool a_cols, const Tensor& b,
                   bool b_cols, int64_t segments, ops::Format fmt, Tensor& out_MN,
                   bool accumulate) {
  MOET_CHECK(fmt == ops::Format::F32 || fmt == ops::Format::BF16,
             "--deterministic tensor parallelism sums fp32 and bf16 GEMMs apart, not ",
             ops::format_name(fmt), ": run the bf16 recipe, or without --deterministic");
  // M: the rows of the products (a sequence-parallel output holds a shard of them)
  const int64_t pieces = TensorParallel::kPieces / tp.parts, M = a.size(a_cols ? 0 : 1),
                N = out_MN.size(1);
  MOET_ASSERT(pieces >= 1 && TensorParallel::kPieces % tp.parts == 0);
  PieceBuffers& buf = buffers();
  float* sums = grow(buf.sums, pieces * M * N);
  for (int64_t p = 0; p < pieces; ++p) {
    const Tensor ap = piece_of(a, a_cols, segments, p, pieces, fmt, buf.a, buf.a16);
    const Tensor bp = piece_of(b, b_cols, segments, p, pieces, fmt, buf.b, buf.b16);
    Tensor c(sums + p * M * N, DType::F32, {M, N});
    ops::gemm(ap, !a_cols, bp, b_cols, c);
  }
  tree_sum_arrays(sums, pieces, M * N);  // the pairwise tree: ((p0 + p1) + (p2 + p3))
  Tensor total(sums, DType::F32, {M, N});
  if (M != out_MN.size(0)) return sp_sum_scatter(tp, total, out_MN, accumulate);
  if (tp.group) tp.group->sum(sums, M * N);
  if (accumulate)
    ops::add(out_MN, total, out_MN);
  else
    ops::copy(total, out_MN);
}

// What a GEMM reads of an activation: its operand rows when its producer wrote them (the values
// may then have no memory), else its values.
const Tensor& gemm_source(const Tensor& values, const ops::Operand* q) {
  return q && !q->rows.empty() ? q->rows : values;
}

// The buffer this part's product of `rows` rows is made in before the group adds it into `out`:
// `out` itself when the sum is in place (no accumulation, the same rows), else a temporary.
Tensor partial_buffer(Tensor& out, int64_t rows, bool accumulate) {
  if (!accumulate && rows == out.size(0)) return out;
  return Tensor(grow(buffers().sums, rows * out.size(1)), DType::F32, {rows, out.size(1)});
}

// out (= or += with accumulate) = Σ over the group of partial; a shard of it when `out` has a
// sequence-parallel shard's rows (the reduce-scatter).
void sum_over_group(const TensorParallel& tp, Tensor& partial, Tensor& out, bool accumulate) {
  if (partial.size(0) != out.size(0)) return sp_sum_scatter(tp, partial, out, accumulate);
  if (tp.group) tp.group->sum(partial.f32(), partial.numel());
  if (accumulate) ops::add(out, partial, out);
}

}  // namespace

void row_parallel_forward(const TensorParallel& tp, const Tensor& x_ND, const Tensor& w_OD,
                          Tensor& y_NO, const ops::LinearOptions& o) {
  if (!tp.active()) return ops::linear_forward(x_ND, w_OD, y_NO, o);
  if (tp.invariant)
    return invariant_sum(tp, gemm_source(x_ND, o.xq), true, w_OD, true, 1, o.precision.fprop, y_NO,
                         o.accumulate);
  Tensor partial = partial_buffer(y_NO, x_ND.size(0), o.accumulate);
  ops::LinearOptions local = o;
  local.accumulate = false;
  ops::linear_forward(x_ND, w_OD, partial, local);
  sum_over_group(tp, partial, y_NO, o.accumulate);
}

void column_parallel_backward(WeightGrads* wg, const TensorParallel& tp, int64_t segments,
                              const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD,
                              Tensor& dx_ND, Tensor& dw_OD, const ops::LinearOptions& o) {
  if (!tp.active()) return linear_backward(wg, dy_NO, x_ND, w_OD, dx_ND, dw_OD, o);
  Tensor no_dx;
  linear_backward(wg, dy_NO, x_ND, w_OD, no_dx, dw_OD, o);  // this part's rows of dw
  if (dx_ND.empty()) return;
  if (tp.invariant)
    return invariant_sum(tp, gemm_source(dy_NO, o.dyq), true, w_OD, false, segments,
                         o.precision.dgrad, dx_ND, o.accumulate);
  Tensor partial = partial_buffer(dx_ND, dy_NO.size(0), o.accumulate), no_dw;
  ops::LinearOptions local = o;
  local.accumulate = false;
  ops::linear_backward(dy_NO, x_ND, w_OD, partial, no_dw, local);
  sum_over_group(tp, partial, dx_ND, o.accumulate);
}

void token_linear_backward(WeightGrads* wg, const TensorParallel& tp, const Tensor& dy_NO,
                           const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND, Tensor& dw_OD,
                           const ops::LinearOptions& o) {
  const bool pieces = token_pieces(tp), shard = tp.sequence_parallel && tp.parts > 1;
  if (!pieces && !shard) return linear_backward(wg, dy_NO, x_ND, w_OD, dx_ND, dw_OD, o);
  Tensor no_dw;
  if (!dx_ND.empty()) ops::linear_backward(dy_NO, x_ND, w_OD, dx_ND, no_dw, o);
  // the weight gradient: this part's pieces (or all its tokens at once), then the parts
  const int64_t O = w_OD.size(0), D = w_OD.size(1), rows = x_ND.size(0);
  const int64_t T = shard ? tp.seq_len / tp.parts : tp.seq_len;
  const int64_t count = pieces ? kTokenPieces / (shard ? tp.parts : 1) : 1;
  thread_local std::vector<float> partial;
  float* g = grow(partial, count * O * D);
  if (pieces) {
    const ops::Format fmt = o.precision.wgrad;
    MOET_CHECK(fmt == ops::Format::F32 || fmt == ops::Format::BF16,
               "--deterministic sums weight gradients by token piece in fp32 and bf16, not ",
               ops::format_name(fmt));
    MOET_ASSERT(rows % T == 0);
    PieceBuffers& buf = buffers();
    const Tensor& dy = gemm_source(dy_NO, o.dyq);
    const Tensor& x = gemm_source(x_ND, o.xq);
    for (int64_t p = 0; p < count; ++p) {
      Tensor g_p(g + p * O * D, DType::F32, {O, D});
      for (int64_t b = 0; b < rows / T; ++b) {
        const Tensor dyp =
            piece_of(dy.rows(b * T, (b + 1) * T), false, 1, p, count, fmt, buf.a, buf.a16);
        const Tensor xp =
            piece_of(x.rows(b * T, (b + 1) * T), false, 1, p, count, fmt, buf.b, buf.b16);
        ops::gemm(dyp, true, xp, false, g_p, 1.0, b == 0 ? 0.0 : 1.0);
      }
    }
    tree_sum_arrays(g, count, O * D);  // this part's pieces in the tree by piece index
  } else {
    Tensor g_all(g, DType::F32, {O, D}), no_dx;
    ops::fill(g_all, 0.0);
    ops::linear_backward(dy_NO, x_ND, w_OD, no_dx, g_all, o);
  }
  if (shard) tp.group->sum(g, O * D);  // … and the parts' in the same tree
  ops::add(dw_OD, Tensor(g, DType::F32, {O, D}), dw_OD);
}

void head_sum(const TensorParallel& tp, const Tensor& x_NHK, int64_t k0, Tensor& out_NR) {
  const int64_t N = x_NHK.size(0), H = x_NHK.size(1), K = x_NHK.size(2), R = out_NR.size(1);
  const int64_t pieces = tp.invariant ? TensorParallel::kPieces / tp.parts : 1;
  MOET_ASSERT(H % pieces == 0 && k0 + R <= K && out_NR.size(0) == N);
  const int64_t per_piece = H / pieces;
  float* sums = grow(buffers().sums, pieces * N * R);
  const float* x = x_NHK.f32();
  for (int64_t p = 0; p < pieces; ++p)
    for (int64_t n = 0; n < N; ++n) {
      float* acc = sums + (p * N + n) * R;
      const float* first = x + (n * H + p * per_piece) * K + k0;
      std::copy(first, first + R, acc);
      for (int64_t h = 1; h < per_piece; ++h)
        for (int64_t r = 0; r < R; ++r) acc[r] += first[h * K + r];
    }
  tree_sum_arrays(sums, pieces, N * R);
  if (tp.group) tp.group->sum(sums, N * R);
  ops::copy(Tensor(sums, DType::F32, {N, R}), out_NR);
}

}  // namespace moet
