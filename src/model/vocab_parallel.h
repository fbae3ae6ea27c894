// The vocabulary split over a tensor-parallel group (Megatron's vocab-parallel embedding, output
// layer and cross-entropy): each part holds rows [part·V/parts, …) of the embedding table and of
// the output projection, and the full logits are never gathered in training — each part keeps
// its columns, and the loss needs only per-row maxima, sums and the target's logit from the
// others. With one part and plain sums these are the single-process ops.
#pragma once
#include <cstdint>

#include "kernels/ops.h"
#include "model/tensor_parallel.h"

namespace moet {

// out_ND = table[tokens] over the parts (each adds its own rows; the others' tokens add −0, so
// the sum is exact). table_VD: this part's rows. Under sequence parallelism out_ND may be this
// part's shard of the tokens (model/sequence_parallel.h): the sum is then a reduce-scatter, and
// the backward's dout_ND such a shard (gathered first).
void vocab_parallel_embedding_forward(const TensorParallel& tp, const Tensor& tokens_N,
                                      const Tensor& table_VD, Tensor& out_ND);
// dtable[tokens] += dout for this part's tokens, in token order (dout is the same on every part).
void vocab_parallel_embedding_backward(const TensorParallel& tp, const Tensor& tokens_N,
                                       const Tensor& dout_ND, Tensor& dtable_VD);

// Cross-entropy of rows whose logits_NV are this part's V columns: each row's log-sum-exp over
// the whole vocabulary into lse_N, and the returned Σ over rows with a target >= 0 of
// lse − logit[target] (the same on every part). With `gradient`, the logits become
// grad_scale · (softmax − onehot) in place (and dq, their operands). Invariant sums: each row's
// Σ exp is added over the kPieces pieces of the vocabulary in the tree, as the linears do.
double vocab_parallel_cross_entropy(const TensorParallel& tp, Tensor& logits_NV,
                                    const Tensor& targets_N, Tensor& lse_N, bool gradient,
                                    double grad_scale, const ops::Operand& dq = {});
// The gradient alone, from lse_N that vocab_parallel_cross_entropy saved.
void vocab_parallel_cross_entropy_backward(const TensorParallel& tp, Tensor& logits_NV,
                                           const Tensor& targets_N, const Tensor& lse_N,
                                           double grad_scale, const ops::Operand& dq = {});
// The whole vocabulary's logits out_RV from each part's columns local_RV (evaluation and
// generation read whole rows).
void gather_vocab(const TensorParallel& tp, const Tensor& local_RV, Tensor& out_RV);

}  // namespace moet
