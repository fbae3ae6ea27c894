#include "model/lm_head.h"

#include "kernels/ops.h"

namespace moet {

LmHead::LmHead(double eps, int64_t D, ParamStore& ps, const std::string& norm_name, Weight* proj,
               const ops::LinearPrecision& lin)
    : eps_(eps), norm_(ps.declare(norm_name, {D}, Init::Ones, false)), proj_(proj), lin_(lin) {
  ps.reserve_operands(proj_, lin_);
}

void LmHead::plan(Workspace& ws) {
  const int64_t N = ws.N(), D = norm_->value.size(0), V = proj_->value.size(0);
  fn_ND_ = ws.act.alloc_f32({N, D});
  rstd_N_ = ws.act.alloc_f32({N});
  logits_NV_ = ws.act.alloc_f32({N, V});
  dlogits_NV_ = ws.scratch.alloc_f32({N, V});
  dfn_ND_ = ws.scratch.alloc_f32({N, D});
}

double LmHead::forward(const Tensor& h_ND, const Tensor& targets_N) {
  ops::rmsnorm_forward(h_ND, norm_->value, eps_, fn_ND_, rstd_N_);
  ops::linear_forward(fn_ND_, proj_->value, logits_NV_, lin_, proj_->operands());
  valid_ = 0;
  const int32_t* t = targets_N.i32();
  for (int64_t n = 0; n < targets_N.numel(); ++n) valid_ += t[n] >= 0;
  Tensor none;
  double sum = ops::cross_entropy(logits_NV_, targets_N, 0.0, none);
  return valid_ ? sum / double(valid_) : 0.0;
}

void LmHead::backward(const Tensor& h_ND, const Tensor& targets_N, double grad_scale, Tensor& dh_ND,
                      bool accumulate) {
  ops::cross_entropy(logits_NV_, targets_N, valid_ ? grad_scale / double(valid_) : 0.0,
                     dlogits_NV_);
  ops::linear_backward(dlogits_NV_, fn_ND_, proj_->value, dfn_ND_, false, proj_->grad, lin_,
                       proj_->operands());
  ops::rmsnorm_backward(dfn_ND_, h_ND, norm_->value, rstd_N_, dh_ND, accumulate, norm_->grad);
}

}  // namespace moet
