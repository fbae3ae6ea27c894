// LM head: final RMSNorm, the (shared) output projection and cross-entropy. The main model and
// every MTP module have one, each with its own norm and the same projection weight. The logits
// are never kept whole: forward runs the projection and the loss in row chunks and saves each
// row's log-sum-exp (ops::cross_entropy_forward). In training, when forward is told the scale
// of the backward to come, each chunk's logits become their gradient at once
// (ops::cross_entropy_fused) and the projection's backward runs in forward — the projection
// weight's gradient accumulates then, the input gradient waits for backward; otherwise backward
// recomputes each chunk's logits from the saved log-sum-exp. Memory is one chunk, not
// [tokens, vocab]. Under tensor parallelism (model/vocab_parallel.h) the projection holds this
// part's rows of the vocabulary: each part computes its columns of the logits, the loss adds
// the parts' row sums, and the input gradient the parts' products.
#pragma once
#include <string>

#include "model/params.h"
#include "model/tensor_parallel.h"
#include "model/workspace.h"

namespace moet {

class WeightGrads;

class LmHead {
 public:
  // lin: the formats of the projection's GEMMs (PrecisionPolicy::head); tp: the vocabulary
  // part proj holds.
  LmHead(double eps, int64_t D, ParamStore& ps, const std::string& norm_name, Weight* proj,
         const ops::LinearPrecision& lin = {}, const TensorParallel& tp = {});
  void plan(Workspace& ws);
  // Mean cross-entropy over the targets >= 0 (0 when there are none). grad_scale != 0: the
  // backward to come will use this scale; its projection part runs now (no logit recompute).
  double forward(const Tensor& h_ND, const Tensor& targets_N, double grad_scale = 0);
  // dh (= or += when accumulate) of grad_scale × the mean loss (the scale forward was given,
  // if it was given one).
  void backward(const Tensor& h_ND, const Tensor& targets_N, double grad_scale, Tensor& dh_ND,
                bool accumulate);
  // The logits of the last forward, recomputed into logits_NV ([tokens, whole vocab], F32).
  void logits(Tensor& logits_NV);
  // Inference: logits_RV = the projection of norm(h_RD), for R <= the planned tokens (no loss).
  void logits_of(const Tensor& h_RD, Tensor& logits_RV);
  // Rows per chunk for a vocabulary of V: a chunk's logits stay within about 64 MB.
  static int64_t chunk_rows(int64_t N, int64_t V);

 private:
  // logits_RV (whole vocabulary) from fn_RD: the projection, and the parts' columns gathered
  void whole_logits(const Tensor& fn_RD, const ops::Operand& fnq, Tensor& logits_RV);

  TensorParallel tp_;
  double eps_;
  Weight* norm_;
  Weight* proj_;
  ops::LinearPrecision lin_;
  int64_t valid_ = 0, chunk_ = 0;
  double fused_scale_ = 0;                  // the scale forward ran the projection's backward with
  Tensor fn_ND_, rstd_N_, lse_N_, dfn_ND_;  // kept (rstd: this part's tokens under SP)
  Tensor fn_shard_ND_, dfn_shard_ND_;       // sequence parallelism's temporaries
  ops::Operand fn_q_;                       // fn as the projection reads it (kept)
  Tensor logits_CV_;                        // temporaries
  ops::Operand dlogits_q_;                  // a chunk's logit gradient as the projection reads it
  WeightGrads* wgrad_ = nullptr;            // where backward sends its weight gradients (plan)
};

}  // namespace moet
