#include "model/local_dispatcher.h"

#include "kernels/ops.h"

namespace moet {

void LocalDispatcher::plan(Workspace& ws, int64_t D, int64_t K) {
  const int64_t N = ws.N(), M = N * K;
  offsets_E1_ = ws.act.alloc_i32({E_ + 1});
  slot_NK_ = ws.act.alloc_i32({N, K});
  token_M_ = ws.act.alloc_i32({M});
  // the experts' rows in the dtype their GEMMs read: bf16 bits where operands are stored so
  // (the dispatched values are the fprop format's, exact in bf16)
  const bool bits =
      dispatch_format_ != ops::Format::F32 && ops::gemm_operand_dtype() == DType::BF16;
  xp_MD_ = ws.act.alloc(bits ? DType::BF16 : DType::F32, {M, D});
  amax_E_ = ops::is_fp4(dispatch_format_) ? ws.act.alloc_f32({E_}) : Tensor{};
}

void LocalDispatcher::dispatch(const Tensor& x_ND, const Tensor& idx_NK) {
  ops::moe_permute_plan(idx_NK, E_, offsets_E1_, slot_NK_, token_M_);
  ops::gather_rows(x_ND, token_M_, xp_MD_, xp_operand_);
  if (ops::is_fp4(dispatch_format_))
    ops::quantize_fp4_segments(xp_MD_, offsets_E1_.i32(), E_, dispatch_format_, amax_E_.f32());
}

void LocalDispatcher::combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND,
                              bool accumulate) {
  ops::unpermute_forward(yp_MD, slot_NK_, gates_NK, y_ND, accumulate);
}

void LocalDispatcher::combine_backward(const Tensor& dy_ND, const Tensor& yp_MD,
                                       const Tensor& gates_NK, Tensor& dyp_MD, Tensor& dgates_NK) {
  ops::unpermute_backward(dy_ND, yp_MD, slot_NK_, gates_NK, dyp_MD, dgates_NK, token_M_,
                          dyp_operand_);
}

void LocalDispatcher::dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) {
  ops::gather_rows_backward(dxp_MD, slot_NK_, dx_ND);
}

}  // namespace moet
