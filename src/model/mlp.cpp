#include "model/mlp.h"

#include "kernels/ops.h"
#include "model/operands.h"
#include "model/tensor_parallel.h"
#include "model/weight_grads.h"

namespace moet {

SwiGluMlp::SwiGluMlp(int64_t D, int64_t F, ParamStore& ps, const std::string& p,
                     const ops::LinearPrecision& lin, const TensorParallel& tp)
    : tp_(tp), D_(D), F_(tp.local(F, "intermediate size")), lin_(lin) {
  gate_up_ = ps.declare(p + "gate_up_proj.weight", {2 * F_, D}, Init::Normal, true, true, false);
  ps.add_name(p + "gate_proj.weight", gate_up_, 0, F_);
  ps.add_name(p + "up_proj.weight", gate_up_, F_, 2 * F_);
  down_ = ps.declare(p + "down_proj.weight", {D, F_}, Init::Normal, true);
  ps.reserve_operands(gate_up_, lin);
  ps.reserve_operands(down_, lin);
  if (tp.active()) {  // this part's rows of gate and of up, its columns of down
    ps.set_shard(gate_up_, tp.shard(0, 2));
    ps.set_shard(down_, tp.shard(1));
  }
}

void SwiGluMlp::plan(Workspace& ws) {
  wgrad_ = ws.wgrad;
  const int64_t N = ws.N();
  gu_N2F_ = ws.act.alloc_f32({N, 2 * F_});
  // h and dgu are read only by the projections
  const GemmInput h = plan_gemm_input(ws.act, N, F_, lin_);
  h_NF_ = h.values, h_q_ = h.q;
  dh_NF_ = ws.scratch.alloc_f32({N, F_});
  const GemmInput dgu = plan_gemm_input(ws.scratch, N, 2 * F_, lin_, true);
  dgu_N2F_ = dgu.values, dgu_q_ = dgu.q;
}

void SwiGluMlp::forward(const Tensor& x_ND, Tensor& y_ND, bool accumulate, const ops::Operand& xq) {
  forward_activation(x_ND, xq);
  row_parallel_forward(
      tp_, h_NF_, down_->value, y_ND,
      {.precision = lin_, .wq = down_->operands(), .xq = &h_q_, .accumulate = accumulate});
}

void SwiGluMlp::forward_activation(const Tensor& x_ND, const ops::Operand& xq) {
  ops::linear_forward(x_ND, gate_up_->value, gu_N2F_,
                      {.precision = lin_, .wq = gate_up_->operands(), .xq = &xq});
  ops::swiglu_forward(gu_N2F_, h_NF_, h_q_);
}

void SwiGluMlp::backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND, bool accumulate_dx,
                         const ops::Operand& xq) {
  linear_backward(wgrad_, dy_ND, h_NF_, down_->value, dh_NF_, down_->grad,
                  {.precision = lin_, .wq = down_->operands(), .xq = &h_q_});
  ops::swiglu_backward(dh_NF_, gu_N2F_, dgu_N2F_, dgu_q_);
  // gate and up: two row blocks of the fused weight, each split over the parts
  column_parallel_backward(wgrad_, tp_, 2, dgu_N2F_, x_ND, gate_up_->value, dx_ND, gate_up_->grad,
                           {.precision = lin_,
                            .wq = gate_up_->operands(),
                            .xq = &xq,
                            .dyq = &dgu_q_,
                            .accumulate = accumulate_dx});
}

}  // namespace moet
