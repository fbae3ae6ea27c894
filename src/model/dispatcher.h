// TokenDispatcher: the boundary between an MoE layer's tokens and its experts — the only
// stage of the layer that may communicate. dispatch() brings every routed (token, k) row to the
// experts, grouped by expert (expert-major, tokens in global order inside an expert);
// combine() brings the experts' outputs back and sums them with the gates in a fixed order.
// LocalDispatcher (local_dispatcher.h) is the single-process case; the expert-parallel
// dispatchers of src/parallel/ implement the same interface.
#pragma once
#include "core/tensor.h"
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

  // x_ND, idx_NK (global expert ids) -> expert_rows(): rows grouped by local expert, then by
  // source rank, then in token order; expert_offsets() gives the segment boundaries.
  virtual void dispatch(const Tensor& x_ND, const Tensor& idx_NK) = 0;
  virtual Tensor expert_rows() const = 0;
  virtual Tensor expert_offsets() const = 0;
  // y_ND (= or +=) Σ_k gates[n,k] · yp[row of (n,k)], k in order.
  virtual void combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND,
                       bool accumulate) = 0;

  // Backward of combine: dyp (expert side) and dgates. Overwrites both.
  virtual void combine_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                                Tensor& dyp_MD, Tensor& dgates_NK) = 0;
  // Backward of dispatch: dx_ND += the expert-side row gradients summed back to their tokens.
  virtual void dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) = 0;
};

}  // namespace moet
