// LM head: final RMSNorm, the (shared) output projection and cross-entropy. The main model and
// every MTP module have one, each with its own norm and the same projection weight. The logits
// are never kept whole: forward runs the projection and the loss in row chunks and saves each
// row's log-sum-exp; backward recomputes a chunk's logits and turns them into their gradient
// from it (ops::cross_entropy_forward/backward), so memory is one chunk, not [tokens, vocab].
#pragma once
#include <string>

#include "model/params.h"
#include "model/workspace.h"

namespace moet {

class LmHead {
 public:
  // lin: the formats of the projection's GEMMs (PrecisionPolicy::head).
  LmHead(double eps, int64_t D, ParamStore& ps, const std::string& norm_name, Weight* proj,
         const ops::LinearPrecision& lin = {});
  void plan(Workspace& ws);
  // Mean cross-entropy over the targets >= 0 (0 when there are none).
  double forward(const Tensor& h_ND, const Tensor& targets_N);
  // dh (= or += when accumulate) of grad_scale × the mean loss.
  void backward(const Tensor& h_ND, const Tensor& targets_N, double grad_scale, Tensor& dh_ND,
                bool accumulate);
  // The logits of the last forward, recomputed into logits_NV ([tokens, vocab], F32).
  void logits(Tensor& logits_NV);
  // Rows per chunk for a vocabulary of V: a chunk's logits stay within about 16 MB.
  static int64_t chunk_rows(int64_t N, int64_t V);

 private:
  double eps_;
  Weight* norm_;
  Weight* proj_;
  ops::LinearPrecision lin_;
  int64_t valid_ = 0, chunk_ = 0;
  Tensor fn_ND_, rstd_N_, lse_N_;  // kept
  Tensor logits_CV_, dfn_ND_;      // temporaries
};

}  // namespace moet
