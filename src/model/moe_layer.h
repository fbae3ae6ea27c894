// The MoE FFN of DeepSeek-V3 as named stages: route (sigmoid, group-limited top-k, gates) →
// dispatch (TokenDispatcher) → grouped GEMM over the experts → combine (weighted, fixed order)
// — plus the shared expert. Only dispatch and combine may communicate.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/dispatcher.h"
#include "model/mlp.h"
#include "model/moe_stages.h"

namespace moet {

class WeightGrads;

class TraceRecorder;

// Per-layer routing statistics of the current step.
struct RouterStats {
  std::vector<int64_t> load_E;  // (token, expert) assignments per expert since reset
  double balance_loss = 0;      // unweighted, summed over micro-batches since reset
  double z_loss = 0;
  int64_t forwards = 0;  // the forward calls counted since reset (balance_loss's denominator)
};

class MoeLayer {
 public:
  // experts: the formats of the routed and shared experts' GEMMs; the tokens travel to the
  // experts in the format of their fprop and come back in `combine` (PrecisionPolicy).
  MoeLayer(const ModelConfig& c, ParamStore& ps, const std::string& prefix,
           std::unique_ptr<TokenDispatcher> dispatcher, const ops::LinearPrecision& experts = {},
           ops::Format combine = ops::Format::F32, const TensorParallel& tp = {});
  void plan(Workspace& ws);
  // xq (every call below): x's operands in the experts' formats (plan_input_operand), written by
  // x's producer — its rows are the tokens dispatched, its cols the shared expert's wgrad
  // operand; empty: the layer quantizes.
  void forward(const Tensor& x_ND, Tensor& y_ND, const ops::Operand& xq = {});
  // dx_ND overwritten; the balance and z-loss gradients enter the router here.
  void backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND, const LossScales& ls,
                const ops::Operand& xq = {});

  // The same in the stages of model/moe_stages.h, split where the dispatcher's exchanges are in
  // flight, so another micro-batch's stages can run while they travel (forward() and backward()
  // run them in a row).
  void forward_stage(MoeStage stage, const Tensor& x_ND, Tensor& y_ND, const ops::Operand& xq = {});
  void backward_stage(MoeStage stage, const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND,
                      const LossScales& ls, const ops::Operand& xq = {});
  // Recomputation, just before backward (model/recompute.h): with `moe` the whole layer's forward
  // again from x (its exchanges too; the output goes to discard_ND), else the shared expert
  // (`shared_experts`) and the experts' SwiGLU (`moe_act`) as selected.
  void recompute(const RecomputeModules& modules, const Tensor& x_ND, Tensor& discard_ND,
                 const ops::Operand& xq = {});
  // While one is alive, forward runs as a recomputation: the step's router statistics and
  // losses are not counted again.
  class Recomputing {
   public:
    explicit Recomputing(MoeLayer& m) : m_(m) { m_.recomputing_ = true; }
    ~Recomputing() { m_.recomputing_ = false; }
    Recomputing(const Recomputing&) = delete;
    Recomputing& operator=(const Recomputing&) = delete;

   private:
    MoeLayer& m_;
  };
  const ops::LinearPrecision& precision() const { return lin_; }
  bool has_shared_expert() const { return shared_ != nullptr; }

  // Losses of the last forward (unweighted).
  double last_balance_loss() const { return last_balance_; }
  double last_z_loss() const { return last_z_; }
  RouterStats& stats() { return stats_; }
  Weight* correction_bias() { return bias_; }
  // The routed experts' weights this process holds ([El, 2F, D] and [El, D, F]) and the row
  // segments each expert's tokens arrive in (one per source rank of the expert-parallel group).
  Weight* experts_gate_up() { return w_gate_up_; }
  Weight* experts_down() { return w_down_; }
  int64_t segments_per_expert() const { return dispatcher_->segments_per_expert(); }
  // Keeps the segments' weight gradients apart: source s's part of the experts' gradients is
  // added into slice s of gate_up_SEOD [S, El, 2F, D] and down_SEOD [S, El, D, F] instead of
  // into the weights' gradients (--deterministic under expert parallelism: the trainer adds
  // them in one process's order over sequences). Empty tensors: back to the weights' gradients.
  void set_expert_grad_parts(Tensor gate_up_SEOD, Tensor down_SEOD);
  const ops::RouterSpec& router_spec() const { return spec_; }
  // Records the router and the experts' GEMMs (routed and shared) as spans on `lane` (null:
  // none); the dispatcher records its own exchanges.
  void set_trace(TraceRecorder* rec, int lane) {
    trace_ = rec;
    trace_lane_ = lane;
  }

 private:
  void route(const Tensor& x_ND);  // scores, choices, gates; losses and loads recorded
  // The experts' rows this call (M of them) and the operands their producers wrote, over this
  // call's segments.
  Tensor h_rows(int64_t M) const;
  // SwiGLU and the down projection of the first M expert rows: h and yp from gu (forward, and
  // again under --recompute-modules moe_act)
  void down_project(int64_t M);
  ops::Operand expert_operand(const ops::Operand& q, int64_t M) const;

  ops::RouterSpec spec_;
  int64_t D_, F_;
  ops::LinearPrecision lin_;
  ops::Format dispatch_;  // the tokens' format on their way to the experts (PrecisionPolicy)
  // the format the layer hands them to the dispatcher in: dispatch_, but bf16 values under FP4
  // (whose dispatcher quantizes each expert's segment)
  ops::Format handover_;
  ops::Format combine_;
  Weight *gate_, *bias_, *w_gate_up_, *w_down_;
  std::unique_ptr<SwiGluMlp> shared_;  // null when n_shared_experts == 0
  std::unique_ptr<TokenDispatcher> dispatcher_;
  int64_t B_ = 0, T_ = 0;
  // kept for backward (h only as its operands h_q_ in low precision: h_MF_ has no memory then)
  Tensor logits_NE_, scores_NE_, idx_NK_, gates_NK_, gu_M2F_, h_MF_, yp_MD_;
  ops::Operand xp_q_, h_q_;  // the expert rows' cols copy (wgrad), h's operands
  // temporaries
  Tensor xq_ND_, dyp_MD_, dgates_NK_, dh_MF_, dgu_M2F_, dxp_MD_, dlogits_NE_;
  ops::Operand dyp_q_, dgu_q_;
  Tensor no_grad_;                     // empty: "don't compute"
  Tensor gate_up_parts_, down_parts_;  // set_expert_grad_parts (empty: the weights' gradients)
  double last_balance_ = 0, last_z_ = 0;
  RouterStats stats_;
  bool recomputing_ = false;
  TraceRecorder* trace_ = nullptr;
  int trace_lane_ = 0;
  WeightGrads* wgrad_ = nullptr;  // where backward sends its weight gradients (plan)
};

}  // namespace moet
