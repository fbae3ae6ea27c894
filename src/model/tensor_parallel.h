// TensorParallel: what a layer split over a tensor-parallel group is given — which part of its
// split dimension this rank holds, and the group that reduces the partial sums at its boundary
// (Megatron's column- and row-parallel linears; docs/parallel.md, "Tensor parallelism"). It is
// handed to the layer the way the MoE layer is handed its dispatcher: the layer's math never asks
// for a rank.
//
// A column-parallel linear holds rows [part·O/parts, (part+1)·O/parts) of its weight w_OD (of
// each of its `segments` equal row blocks: SwiGLU's fused gate/up weight has two). Its outputs
// are those columns of y, the same bits one process computes (a GEMM's output element does not
// depend on which other outputs the call computes, tests/mpi_tensor_parallel.cpp checks it). Its
// input gradient dx = dy·w sums over O: each part adds its rows, the group adds the parts.
// A row-parallel linear holds columns of w_OD, and its input x_ND arrives split the same way (the
// column-parallel linear before it made it): its output is the sum of the parts' products, its
// gradients are split outputs.
//
// TP-invariant sums (`invariant`, --deterministic): one GEMM over a part's whole reduction adds
// its products in an order that depends on how long the part is, so one process and two parts
// would differ in the last bits. Invariant sums cut the full reduction dimension into kPieces
// equal pieces, multiply each on its own, and add the pieces in the pairwise tree over pieces —
// a part's pieces here, the parts by the group's allreduce_sum (the same pairwise tree over the
// ranks, parallel/communicator.h). One process (a single part of kPieces pieces) and any
// power-of-two group that divides kPieces then add the same products in the same order.
//
// The group's collectives are an interface (TpGroup) that parallel/ implements over a
// Communicator (parallel/tp_group.h), as it implements the MoE layer's dispatcher.
#pragma once
#include <cstdint>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recipe.h"

namespace moet {

class WeightGrads;

// The collectives of a tensor-parallel group, as the layers need them.
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  // x = Σ over the group's ranks, added in the pairwise tree over the ranks in rank order (every
  // rank gets the same bits).
  virtual void sum(float* x, int64_t n) = 0;
  virtual void sum(double* x, int64_t n) = 0;
  // recv = every rank's `bytes` from send, in rank order.
  virtual void gather(const void* send, int64_t bytes, void* recv) = 0;
  // Reduce-scatter: x[n·r/P, n·(r+1)/P) on rank r (of P) = Σ over the ranks, each element added
  // in the same pairwise tree as sum() adds it (the rest of x is left undefined).
  virtual void sum_scatter(float* x, int64_t n) = 0;
};

struct TensorParallel {
  // Pieces of a reduction under invariant sums: groups of 1, 2 and 4 ranks give the same bits.
  static constexpr int64_t kPieces = 4;
  int64_t part = 0, parts = 1;  // this rank's part of the split dimension
  TpGroup* group = nullptr;     // the tensor-parallel group (null: one part)
  bool invariant = false;       // TP-invariant sums (above)
  // Sequence parallelism (--sequence-parallel, model/sequence_parallel.h): the residual stream,
  // the norms and the embedding's output hold this part's tokens of each sequence only; the
  // column-parallel inputs are all-gathered, the row-parallel outputs reduce-scattered.
  bool sequence_parallel = false;
  int64_t seq_len = 0;  // T of the model's micro-batches (set by Model)

  // This part's share of a dimension of n (n / parts); throws moet::Error with one line naming
  // `what` when it does not divide (or, with invariant sums, when the pieces do not).
  int64_t local(int64_t n, const char* what) const;
  // Tokens of this part's shard of N = B·T tokens (N itself without sequence parallelism).
  int64_t tokens(int64_t N) const { return sequence_parallel ? N / parts : N; }
  // Whether the linears below differ from a plain linear at all.
  bool active() const { return parts > 1 || invariant; }
  // What a weight split along `dim` (of `segments` blocks) is: its part, and under invariant
  // sums its pieces (its gradient's Σ g² is then summed by piece, Weight::grad_square_sum).
  WeightShard shard(int dim, int64_t segments = 1) const {
    return {.dim = dim,
            .segments = segments,
            .part = part,
            .parts = parts,
            .pieces = invariant ? kPieces / parts : 0};
  }
};

// Whether a run can use TP-invariant sums: the model's split dimensions (heads, FFN sizes,
// vocabulary) divide into kPieces pieces and its recipe multiplies in fp32 or bf16 (the formats
// the invariant sums run). --deterministic uses them then, on one process too, so that any
// --tp dividing kPieces gives its bits.
bool tp_invariant_sums_possible(const ModelConfig& c);
bool tp_invariant_sums(const ModelConfig& c, const PrecisionPolicy& precision);

// y_NO = x_ND · w_ODᵀ summed over the parts, for a row-parallel linear (x and w hold this part's
// columns); y += with o.accumulate. The same on every rank of the group — or, when y has a
// sequence-parallel shard's rows (model/sequence_parallel.h), this part's shard of it (a
// reduce-scatter, each element the same bits).
void row_parallel_forward(const TensorParallel& tp, const Tensor& x_ND, const Tensor& w_OD,
                          Tensor& y_NO, const ops::LinearOptions& o);
// The backward of a column-parallel linear whose weight rows are `segments` equal blocks, each
// split over the parts: dw_OD (this part's rows) through `wg` as every layer's weight gradients
// go (at once or kept for a W pass), and dx_ND (the whole, the same on every rank; += with
// o.accumulate) summed over the parts — a shard of it when dx has a shard's rows.
void column_parallel_backward(WeightGrads* wg, const TensorParallel& tp, int64_t segments,
                              const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD,
                              Tensor& dx_ND, Tensor& dw_OD, const ops::LinearOptions& o);

// The backward of a replicated linear whose input is this part's tokens (MLA's down-projections
// under sequence parallelism): dx_ND of those tokens (= or += with o.accumulate), and the weight's
// gradient summed over every part's tokens — and under TP-invariant sums by token piece
// (model/sequence_parallel.h), on one process too; dw_OD +=. Without either, linear_backward.
void token_linear_backward(WeightGrads* wg, const TensorParallel& tp, const Tensor& dy_NO,
                           const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND, Tensor& dw_OD,
                           const ops::LinearOptions& o);

// out_NR = Σ over heads of x_NHK[:, h, k0 : k0 + R], over every part's heads (MLA's rope key is
// shared by the heads, so its gradient sums theirs). With invariant sums the heads are summed in
// order within each of the kPieces pieces of the full head dimension, the pieces in the tree.
void head_sum(const TensorParallel& tp, const Tensor& x_NHK, int64_t k0, Tensor& out_NR);

}  // namespace moet
