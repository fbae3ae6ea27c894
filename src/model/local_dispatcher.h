// LocalDispatcher: every expert lives in this process; dispatch is a permutation (counting
// sort by expert) and combine the weighted unpermutation.
#pragma once
#include "model/dispatcher.h"

namespace moet {

class LocalDispatcher final : public TokenDispatcher {
 public:
  explicit LocalDispatcher(int64_t n_experts) : E_(n_experts) {}
  void plan(Workspace& ws, int64_t D, int64_t K) override;
  int64_t max_expert_rows() const override { return xp_MD_.size(0); }
  int64_t first_local_expert() const override { return 0; }
  int64_t num_local_experts() const override { return E_; }
  int64_t segments_per_expert() const override { return 1; }
  bool takes_bf16_rows() const override { return true; }
  bool writes_expert_operands() const override { return true; }
  void dispatch(const Tensor& x_ND, const Tensor& idx_NK) override;
  Tensor expert_rows() const override { return xp_MD_; }
  Tensor expert_offsets() const override { return offsets_E1_; }
  const float* segment_amax() const override { return amax_E_.empty() ? nullptr : amax_E_.f32(); }
  void combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND, bool accumulate) override;
  void combine_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                        Tensor& dyp_MD, Tensor& dgates_NK) override;
  void dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) override;

 private:
  int64_t E_;
  Tensor offsets_E1_, slot_NK_, token_M_, xp_MD_;  // the layout (the "handle") and the rows
  Tensor amax_E_;                                  // FP4 dispatch: each expert's segment amax
};

}  // namespace moet
