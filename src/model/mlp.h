// SwiGLU MLP: down(silu(gate(x)) * up(x)). Dense FFN layers and the shared experts use it.
// gate_proj and up_proj are stored fused as one [2F, D] weight (one GEMM), exposed under their
// Hugging Face names.
#pragma once
#include <string>

#include "model/params.h"
#include "model/workspace.h"

namespace moet {

class SwiGluMlp {
 public:
  // lin: the formats of its GEMMs (PrecisionPolicy).
  SwiGluMlp(int64_t D, int64_t F, ParamStore& ps, const std::string& prefix,
            const ops::LinearPrecision& lin = {});
  void plan(Workspace& ws);
  // y_ND = mlp(x_ND), or y += mlp(x) when accumulate.
  void forward(const Tensor& x_ND, Tensor& y_ND, bool accumulate);
  // dx_ND = d/dx, or dx += when accumulate_dx; weight gradients accumulate.
  void backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND, bool accumulate_dx);

 private:
  int64_t D_, F_;
  ops::LinearPrecision lin_;
  Weight *gate_up_, *down_;
  Tensor gu_N2F_, h_NF_;    // kept
  Tensor dh_NF_, dgu_N2F_;  // temporaries
};

}  // namespace moet
