// LM head: final RMSNorm, the (shared) output projection and cross-entropy. The main model and
// every MTP module have one, each with its own norm and the same projection weight.
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
  const Tensor& logits() const { return logits_NV_; }

 private:
  double eps_;
  Weight* norm_;
  Weight* proj_;
  ops::LinearPrecision lin_;
  int64_t valid_ = 0;
  Tensor fn_ND_, rstd_N_, logits_NV_;  // kept
  Tensor dlogits_NV_, dfn_ND_;         // temporaries
};

}  // namespace moet
