// Sequence parallelism (Megatron's --sequence-parallel, docs/parallel.md): under tensor
// parallelism the residual stream, the norms and the embedding's output hold only this part's
// tokens — of each of the B sequences of a micro-batch, positions [part·T/P, (part+1)·T/P) —
// and the tensor-parallel boundaries change their collectives: a column-parallel linear's input
// is all-gathered over the group (sp_gather), a row-parallel linear's output reduce-scattered
// (row_parallel_forward writes a shard when its output has a shard's rows, model/
// tensor_parallel.h). A shard's rows are [B, T/P] in sequence order; a gathered tensor's [B, T].
//
// Token pieces: a weight used on a shard (the norms) gets a partial gradient from each part's
// tokens. Under TP-invariant sums (--deterministic) each sequence is cut into kTokenPieces equal
// pieces in position order; each piece's partial is its own sum, and the pieces are added in the
// pairwise tree by piece index — a part's pieces here, the parts by the group's sum — so one
// process (one part of all the pieces), SP 2, 4 and 8 add the same numbers in the same order.
#pragma once
#include <cstdint>

#include "kernels/ops.h"
#include "model/operands.h"
#include "model/tensor_parallel.h"

namespace moet {

// Pieces of a sequence under TP-invariant sums: SP 2, 4 and 8 give the same bits.
inline constexpr int64_t kTokenPieces = 8;

// Whether gradients summed over tokens are summed by piece: TP-invariant sums over sequences that
// divide into kTokenPieces pieces.
bool token_pieces(const TensorParallel& tp);

// full_ND (B·T rows) = every part's shard local_ND (B·T/P rows), in sequence order.
void sp_gather(const TensorParallel& tp, const Tensor& local_ND, Tensor& full_ND);
// The same for a GEMM input: the gathered values, and its operands made from them (the values a
// producer would have written whole; staging: B·T rows of F32 the gather goes through when the
// values have no memory of their own or are the operands' rows).
void sp_gather_input(const TensorParallel& tp, const Tensor& local_ND, const GemmInput& full,
                     Tensor& staging_ND);
// local_ND (= or += with accumulate) = this part's shard of partial_ND summed over the group,
// each element in the pairwise tree over the parts (the bits an allreduce gives). partial_ND
// (B·T rows, F32) is overwritten.
void sp_sum_scatter(const TensorParallel& tp, Tensor& partial_ND, Tensor& local_ND,
                    bool accumulate);
// local_ND (= or += with accumulate) = this part's shard of full_ND (the same on every part).
void sp_shard(const TensorParallel& tp, const Tensor& full_ND, Tensor& local_ND, bool accumulate);

// ops::rmsnorm_backward over this part's tokens, its weight's gradient summed over every part's
// (under sequence parallelism) and by token piece (token_pieces); dw_D +=.
void norm_backward(const TensorParallel& tp, const Tensor& dy_ND, const Tensor& x_ND,
                   const Tensor& w_D, const Tensor& rstd_N, Tensor& dx_ND, bool accumulate_dx,
                   Tensor& dw_D, const ops::Operand& dxq = {});

}  // namespace moet
