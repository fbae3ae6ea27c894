// TokenDispatcher: the boundary between an MoE layer's tokens and its experts — the only
// stage of the layer that may communicate. dispatch() brings every routed (token, k) row to the
// experts, grouped by expert (expert-major, tokens in global order inside an expert);
// combine() brings the experts' outputs back and sums them with the gates in a fixed order.
// LocalDispatcher (local_dispatcher.h) is the single-process case; the expert-parallel
// dispatchers of src/parallel/ implement the same interface.
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"
#include "model/workspace.h"

namespace moet {

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // Allocates the layout (kept for backward) and the expert-side row buffers for N tokens of
  // width D with K experts each.
  virtual void plan(Workspace& ws, int64_t D, int64_t K) = 0;
  // Most expert-side rows a call can produce (buffers of the experts are sized by it).
  virtual int64_t max_expert_rows() const = 0;
  // The experts whose weights live in this process: global ids [first, first + count).
  virtual int64_t first_local_expert() const = 0;
  virtual int64_t num_local_experts() const = 0;
  // Row segments per local expert in expert_rows(): one per source rank of the expert-parallel
  // group (1 for the local dispatcher); expert_offsets() has num_local * segments + 1 entries.
  virtual int64_t segments_per_expert() const = 0;

  // Formats of the rows that travel: to the experts (dispatch) and back (combine). The MoE
  // layer hands over rows that already hold values of these formats (quantized along D), so a
  // dispatcher that communicates sends them packed — FP8 codes with their scales, or bf16 —
  // losslessly; the single-process dispatcher has nothing to send. Backward exchanges stay fp32.
  // An FP4 dispatch format (the recipes nvfp4 and mxfp4) differs: the layer hands over bf16
  // values, and the dispatcher quantizes each (expert, source) segment of expert_rows() on its
  // own (ops::quantize_fp4_segments: NVFP4's global scale is the segment's) — at the source
  // where segments travel apart (all-to-all: E2M1 codes, block scales and each segment's amax on
  // the wire), on arrival where they do not (all-gather, one process) — so every dispatcher
  // hands the experts the same values; segment_amax() has the amaxes.
  void set_payload_formats(ops::Format dispatch, ops::Format combine) {
    dispatch_format_ = dispatch;
    combine_format_ = combine;
  }

  // Whether dispatch takes x as bf16 bits (the MoE layer's operand rows where operands are
  // stored as bf16) and hands the experts bf16 rows; otherwise x is F32.
  virtual bool takes_bf16_rows() const { return false; }
  // The operands of expert-side rows that a dispatcher writes as it produces those rows, where it
  // can (writes_expert_operands()): the cols copy of expert_rows() (its rows copy is the rows
  // themselves) and the operands of combine_backward's dyp, cols blocks restarting at each
  // expert_offsets() segment. For a dispatcher that does not, the MoE layer quantizes them.
  void set_expert_operands(const ops::Operand& xp, const ops::Operand& dyp) {
    xp_operand_ = xp;
    dyp_operand_ = dyp;
  }
  virtual bool writes_expert_operands() const { return false; }

  // x_ND, idx_NK (global expert ids) -> expert_rows(): rows grouped by local expert, then by
  // source rank, then in token order; expert_offsets() gives the segment boundaries.
  virtual void dispatch(const Tensor& x_ND, const Tensor& idx_NK) = 0;
  virtual Tensor expert_rows() const = 0;
  virtual Tensor expert_offsets() const = 0;
  // FP4 dispatch: the amax each expert_offsets() segment was quantized under (nullptr otherwise).
  virtual const float* segment_amax() const { return nullptr; }
  // y_ND (= or +=) Σ_k gates[n,k] · yp[row of (n,k)], k in order.
  virtual void combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND,
                       bool accumulate) = 0;

  // Backward of combine: dyp (expert side) and dgates. Overwrites both.
  virtual void combine_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                                Tensor& dyp_MD, Tensor& dgates_NK) = 0;
  // Backward of dispatch: dx_ND += the expert-side row gradients summed back to their tokens.
  virtual void dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) = 0;

  // Split phases, used by the MoE layer: *_start issues the communication, *_finish completes
  // it, and the layer computes what does not depend on it in between (the shared expert, the
  // router's backward). A dispatcher that communicates asynchronously overrides them; the
  // defaults run the one-call forms (in *_start, or in *_finish where an output is needed).
  virtual void dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) { dispatch(x_ND, idx_NK); }
  virtual void dispatch_finish() {}
  virtual void combine_start(const Tensor& yp_MD) { pending_ = yp_MD; }
  virtual void combine_finish(const Tensor& gates_NK, Tensor& y_ND, bool accumulate) {
    combine(pending_, gates_NK, y_ND, accumulate);
  }
  // dgates_NK is written by combine_backward_finish at the latest.
  virtual void combine_backward_start(const Tensor& dy_ND, const Tensor& yp_MD,
                                      const Tensor& gates_NK, Tensor& dgates_NK) {
    pending_dy_ = dy_ND;
    pending_ = yp_MD;
    pending_gates_ = gates_NK;
    pending_dgates_ = dgates_NK;
  }
  virtual void combine_backward_finish(Tensor& dyp_MD) {
    combine_backward(pending_dy_, pending_, pending_gates_, dyp_MD, pending_dgates_);
  }
  virtual void dispatch_backward_start(const Tensor& dxp_MD) { pending_ = dxp_MD; }
  virtual void dispatch_backward_finish(Tensor& dx_ND) { dispatch_backward(pending_, dx_ND); }

 protected:
  ops::Format dispatch_format_ = ops::Format::F32, combine_format_ = ops::Format::F32;
  ops::Operand xp_operand_, dyp_operand_;

 private:
  Tensor pending_, pending_dy_, pending_gates_, pending_dgates_;  // views held between phases
};

}  // namespace moet
