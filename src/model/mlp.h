// SwiGLU MLP: down(silu(gate(x)) * up(x)). Dense FFN layers and the shared experts use it.
// gate_proj and up_proj are stored fused as one [2F, D] weight (one GEMM), exposed under their
// Hugging Face names. Under tensor parallelism (model/tensor_parallel.h) the FFN dimension F is
// split: the fused gate/up projection is column-parallel (this part's rows of gate and of up),
// down row-parallel, as Megatron splits it.
#pragma once
#include <string>

#include "kernels/ops.h"
#include "model/params.h"
#include "model/tensor_parallel.h"
#include "model/workspace.h"

namespace moet {

class WeightGrads;

class SwiGluMlp {
 public:
  // lin: the formats of its GEMMs (PrecisionPolicy); tp: the part of F this rank holds.
  SwiGluMlp(int64_t D, int64_t F, ParamStore& ps, const std::string& prefix,
            const ops::LinearPrecision& lin = {}, const TensorParallel& tp = {});
  void plan(Workspace& ws);
  // y_ND = mlp(x_ND), or y += mlp(x) when accumulate. xq: x's operands in the MLP's formats
  // (plan_input_operand), written by x's producer; empty: none.
  void forward(const Tensor& x_ND, Tensor& y_ND, bool accumulate, const ops::Operand& xq = {});
  // The first part of forward: gate/up projection and SwiGLU, all that backward reads
  // (recomputation, --recompute-modules mlp and shared_experts, runs it again).
  void forward_activation(const Tensor& x_ND, const ops::Operand& xq = {});
  // dx_ND = d/dx, or dx += when accumulate_dx; weight gradients accumulate.
  void backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND, bool accumulate_dx,
                const ops::Operand& xq = {});
  const ops::LinearPrecision& precision() const { return lin_; }

 private:
  TensorParallel tp_;
  int64_t D_, F_;  // F_: this part's share of the FFN dimension
  ops::LinearPrecision lin_;
  Weight *gate_up_, *down_;
  // kept (h: model/operands.h's GemmInput)
  Tensor gu_N2F_, h_NF_;
  ops::Operand h_q_;
  Tensor dh_NF_, dgu_N2F_;  // temporaries
  ops::Operand dgu_q_;
  WeightGrads* wgrad_ = nullptr;  // where backward sends its weight gradients (plan)
};

}  // namespace moet
