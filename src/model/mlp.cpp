#include "model/mlp.h"

#include "kernels/ops.h"

namespace moet {

SwiGluMlp::SwiGluMlp(int64_t D, int64_t F, ParamStore& ps, const std::string& p) : D_(D), F_(F) {
  gate_up_ = ps.declare(p + "gate_up_proj.weight", {2 * F, D}, Init::Normal, true, true, false);
  ps.add_name(p + "gate_proj.weight", gate_up_, 0, F);
  ps.add_name(p + "up_proj.weight", gate_up_, F, 2 * F);
  down_ = ps.declare(p + "down_proj.weight", {D, F}, Init::Normal, true);
}

void SwiGluMlp::plan(Workspace& ws) {
  const int64_t N = ws.N();
  gu_N2F_ = ws.act.alloc_f32({N, 2 * F_});
  h_NF_ = ws.act.alloc_f32({N, F_});
  dh_NF_ = ws.scratch.alloc_f32({N, F_});
  dgu_N2F_ = ws.scratch.alloc_f32({N, 2 * F_});
}

void SwiGluMlp::forward(const Tensor& x_ND, Tensor& y_ND, bool accumulate) {
  ops::linear_forward(x_ND, gate_up_->value, gu_N2F_);
  ops::swiglu_forward(gu_N2F_, h_NF_);
  ops::gemm(h_NF_, false, down_->value, true, y_ND, 1.0, accumulate ? 1.0 : 0.0);
}

void SwiGluMlp::backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND,
                         bool accumulate_dx) {
  ops::linear_backward(dy_ND, h_NF_, down_->value, dh_NF_, false, down_->grad);
  ops::swiglu_backward(dh_NF_, gu_N2F_, dgu_N2F_);
  ops::linear_backward(dgu_N2F_, x_ND, gate_up_->value, dx_ND, accumulate_dx, gate_up_->grad);
}

}  // namespace moet
