#include "model/moe_layer.h"

#include "core/trace.h"
#include "model/operands.h"
#include "model/recipe.h"
#include "model/weight_grads.h"

namespace moet {

MoeLayer::MoeLayer(const ModelConfig& c, ParamStore& ps, const std::string& p,
                   std::unique_ptr<TokenDispatcher> dispatcher, const ops::LinearPrecision& experts,
                   ops::Format combine, const TensorParallel& tp)
    : D_(c.hidden_size),
      F_(c.moe_intermediate_size),
      lin_(experts),
      dispatch_(PrecisionPolicy::dispatch_format(experts)),
      handover_(ops::is_fp4(dispatch_) ? ops::Format::BF16 : dispatch_),
      combine_(combine),
      dispatcher_(std::move(dispatcher)) {
  // Routed experts under tensor parallelism need its tokens split over the group (Megatron
  // requires sequence parallelism for MoE with TP): not built yet (docs/parallel.md).
  MOET_CHECK(tp.parts == 1, "MoE layers under --tp ", tp.parts,
             " need sequence parallelism's token split, which moet does not have yet: run --tp 1 "
             "(with --ep for the experts), or a model without MoE layers");
  if (c.n_shared_experts > 0)
    shared_ = std::make_unique<SwiGluMlp>(c.hidden_size, c.shared_intermediate_size(), ps,
                                          p + "shared_experts.", experts, tp);
  dispatcher_->set_payload_formats(dispatch_, combine_);
  spec_.n_experts = c.n_routed_experts;
  spec_.n_group = c.n_group;
  spec_.topk_group = c.topk_group;
  spec_.top_k = c.num_experts_per_tok;
  spec_.norm_topk_prob = c.norm_topk_prob;
  spec_.scaling = c.routed_scaling_factor;
  const int64_t E = spec_.n_experts, first = dispatcher_->first_local_expert(),
                El = dispatcher_->num_local_experts();
  gate_ = ps.declare(p + "gate.weight", {E, D_}, Init::Normal, true);
  bias_ = ps.declare(p + "gate.e_score_correction_bias", {E}, Init::Zeros, false, false);
  // This process's experts' gate/up weights back to back [El, 2F, D] (one grouped GEMM), down
  // [El, D, F]: a shard of the full [E, ...] weights starting at expert `first`.
  w_gate_up_ =
      ps.declare(p + "experts.gate_up_proj", {El, 2 * F_, D_}, Init::Normal, true, true, false);
  w_down_ = ps.declare(p + "experts.down_proj", {El, D_, F_}, Init::Normal, true, true, false);
  w_gate_up_->expert = w_down_->expert = true;
  ps.reserve_operands(w_gate_up_, lin_);
  ps.reserve_operands(w_down_, lin_);
  w_gate_up_->init_offset = first * 2 * F_ * D_;
  w_down_->init_offset = first * D_ * F_;
  for (int64_t e = 0; e < El; ++e) {
    std::string n = p + "experts." + std::to_string(first + e) + ".";
    ps.add_name(n + "gate_proj.weight", w_gate_up_, e * 2 * F_, e * 2 * F_ + F_);
    ps.add_name(n + "up_proj.weight", w_gate_up_, e * 2 * F_ + F_, (e + 1) * 2 * F_);
    ps.add_name(n + "down_proj.weight", w_down_, e * D_, (e + 1) * D_);
  }
  stats_.load_E.assign(E, 0);
}

void MoeLayer::plan(Workspace& ws) {
  wgrad_ = ws.wgrad;
  B_ = ws.B;
  T_ = ws.T;
  const int64_t N = ws.N(), E = spec_.n_experts, K = spec_.top_k;
  dispatcher_->plan(ws, D_, K);
  const int64_t M = dispatcher_->max_expert_rows();
  Arena& a = ws.act;
  logits_NE_ = a.alloc_f32({N, E});
  scores_NE_ = a.alloc_f32({N, E});
  idx_NK_ = a.alloc_i32({N, K});
  gates_NK_ = a.alloc_f32({N, K});
  gu_M2F_ = a.alloc_f32({M, 2 * F_});
  // read only by the down projection
  const GemmInput h = plan_gemm_input(ws.kept(RecomputeModule::kMoeAct), M, F_, lin_);
  h_MF_ = h.values, h_q_ = h.q;
  // the experts' outputs, read again only by the gates' gradient: made again with the SwiGLU
  // (Megatron weights the activation by the gates instead and keeps no expert output)
  yp_MD_ = ws.kept(RecomputeModule::kMoeAct).alloc_f32({M, D_});
  // the expert rows are their own rows copy; FP8 wgrads read a cols copy of them
  // (FP4: none, the grouped GEMMs quantize each segment themselves)
  if (!ops::is_fp4(lin_.wgrad)) xp_q_.fmt = lin_.wgrad;
  if (ops::is_fp8(lin_.wgrad) && lin_.fprop == lin_.wgrad)
    xp_q_.cols = a.alloc(ops::gemm_operand_dtype(), {M, D_});
  if (shared_) {
    Workspace shared = ws.inside(RecomputeModule::kSharedExperts);
    shared_->plan(shared);
  }
  Arena& s = ws.scratch;
  if (handover_ != ops::Format::F32) xq_ND_ = s.alloc_f32({N, D_});
  dgates_NK_ = s.alloc_f32({N, K});
  dh_MF_ = s.alloc_f32({M, F_});
  dlogits_NE_ = s.alloc_f32({N, E});
  // read only by the experts' backward (dyp written by the dispatcher first)
  const GemmInput dyp = plan_gemm_input(s, M, D_, lin_, true, true),
                  dgu = plan_gemm_input(s, M, 2 * F_, lin_, true);
  dyp_MD_ = dyp.values, dyp_q_ = dyp.q;
  dgu_M2F_ = dgu.values, dgu_q_ = dgu.q;
  // the experts' input gradients: written by the gate/up projection's backward, after the down
  // projection's backward last read dyp, so the same bytes
  dxp_MD_ = dyp_MD_;
  // blocks of the expert side restart at every (expert, source) segment
  for (ops::Operand* q : {&xp_q_, &h_q_, &dyp_q_, &dgu_q_})
    q->segments = dispatcher_->expert_offsets();
  dispatcher_->set_expert_operands(xp_q_, dyp_q_);
}

Tensor MoeLayer::h_rows(int64_t M) const { return h_MF_.rows(0, M); }

ops::Operand MoeLayer::expert_operand(const ops::Operand& q, int64_t M) const {
  ops::Operand o = operand_rows(q, M);
  o.segments = dispatcher_->expert_offsets();
  if (&q == &xp_q_ && !ops::is_fp8(q.fmt) && q.fmt != ops::Format::F32) {
    // element-wise formats: the expert rows hold the values, and are the operand where they are
    // in the operand dtype
    const Tensor xp = dispatcher_->expert_rows();
    if (xp.dtype == ops::gemm_operand_dtype()) o.rows = xp;
  }
  return o;
}

void MoeLayer::forward(const Tensor& x_ND, Tensor& y_ND, const ops::Operand& xq) {
  for (MoeStage stage : kMoeStages) forward_stage(stage, x_ND, y_ND, xq);
}

void MoeLayer::route(const Tensor& x_ND) {
  TraceRecorder::Span span(trace_, trace_lane_, "router fwd", trace::kRouter);
  ops::linear_forward(x_ND, gate_->value, logits_NE_);
  ops::router_forward(logits_NE_, bias_->value, spec_, scores_NE_, idx_NK_, gates_NK_);
  last_balance_ = ops::balance_loss(scores_NE_, idx_NK_, B_, T_, 0.0, no_grad_);
  last_z_ = ops::z_loss(logits_NE_, 0.0, no_grad_);
  if (recomputing_) return;
  stats_.balance_loss += last_balance_;
  stats_.z_loss += last_z_;
  ++stats_.forwards;
  const int32_t* idx = idx_NK_.i32();
  for (int64_t i = 0; i < idx_NK_.numel(); ++i) ++stats_.load_E[idx[i]];
}

void MoeLayer::forward_stage(MoeStage stage, const Tensor& x_ND, Tensor& y_ND,
                             const ops::Operand& xq) {
  if (stage == MoeStage::kSend) {
    // route, dispatch (the shared expert computes while the tokens travel)
    route(x_ND);
    // The tokens travel in the dispatch format (the experts' fprop format): quantized along D by
    // x's producer (xq's rows) or here, so every dispatcher (and every expert-parallel layout)
    // hands the experts the same values; under FP4, handed over as bf16 values, each expert's
    // segment quantized by the dispatcher.
    if (handover_ == ops::Format::F32) {
      dispatcher_->dispatch_start(x_ND, idx_NK_);
    } else if (xq.rows.empty() || xq.fmt != handover_) {
      ops::quantize(x_ND, handover_, ops::BlockAxis::Rows, xq_ND_);
      dispatcher_->dispatch_start(xq_ND_, idx_NK_);
    } else if (xq.rows.dtype == DType::BF16 && !dispatcher_->takes_bf16_rows()) {
      ops::copy(xq.rows, xq_ND_);  // widened for a dispatcher that sends fp32 values
      dispatcher_->dispatch_start(xq_ND_, idx_NK_);
    } else {
      dispatcher_->dispatch_start(xq.rows, idx_NK_);
    }
    if (shared_) {
      TraceRecorder::Span span(trace_, trace_lane_, "shared expert fwd", trace::kExperts);
      shared_->forward(x_ND, y_ND, false, xq);
    }
    return;
  }
  if (stage == MoeStage::kExperts) {
    dispatcher_->dispatch_finish();
    Tensor xp = dispatcher_->expert_rows(), off = dispatcher_->expert_offsets();
    const int64_t M = xp.size(0);
    Tensor gu = gu_M2F_.rows(0, M);
    const ops::Operand xpq = expert_operand(xp_q_, M);
    if (!xpq.cols.empty() && !dispatcher_->writes_expert_operands())
      ops::quantize_operand(xp, xpq);  // the wgrad copy, for a dispatcher that cannot write it
    const int64_t S = dispatcher_->segments_per_expert();
    TraceRecorder::Span span(trace_, trace_lane_, "experts fwd", trace::kExperts);
    ops::grouped_linear_forward(xp, off, w_gate_up_->value, gu,
                                {.segments_per_expert = S,
                                 .precision = lin_,
                                 .wq = w_gate_up_->operands(),
                                 .x_in_format = true,
                                 .x_fp4_amax = dispatcher_->segment_amax()});
    down_project(M);
    span.end();
    dispatcher_->combine_start(yp_MD_.rows(0, M));
    return;
  }
  dispatcher_->combine_finish(gates_NK_, y_ND, shared_ != nullptr);
}

void MoeLayer::down_project(int64_t M) {
  const Tensor off = dispatcher_->expert_offsets();
  Tensor h = h_rows(M), yp = yp_MD_.rows(0, M);
  const ops::Operand hq = expert_operand(h_q_, M);
  ops::swiglu_forward(gu_M2F_.rows(0, M), h, hq);
  // outputs travel back (and are summed) in the combine format: rounded as each expert's GEMM
  // ends
  ops::grouped_linear_forward(h, off, w_down_->value, yp,
                              {.segments_per_expert = dispatcher_->segments_per_expert(),
                               .precision = lin_,
                               .wq = w_down_->operands(),
                               .xq = &hq,
                               .y_format = combine_});
}

void MoeLayer::recompute(const RecomputeModules& modules, const Tensor& x_ND, Tensor& discard_ND,
                         const ops::Operand& xq) {
  if (modules.has(RecomputeModule::kMoe)) {
    Recomputing again(*this);
    forward(x_ND, discard_ND, xq);
    return;
  }
  if (shared_ && modules.has(RecomputeModule::kSharedExperts))
    shared_->forward_activation(x_ND, xq);
  if (modules.has(RecomputeModule::kMoeAct)) {
    down_project(dispatcher_->expert_rows().size(0));
  }
}

void MoeLayer::set_expert_grad_parts(Tensor gate_up_SEOD, Tensor down_SEOD) {
  gate_up_parts_ = gate_up_SEOD;  // shapes checked by the grouped GEMM
  down_parts_ = down_SEOD;
}

void MoeLayer::backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND,
                        const LossScales& ls, const ops::Operand& xq) {
  for (MoeStage stage : kMoeStages) backward_stage(stage, dy_ND, x_ND, dx_ND, ls, xq);
}

void MoeLayer::backward_stage(MoeStage stage, const Tensor& dy_ND, const Tensor& x_ND,
                              Tensor& dx_ND, const LossScales& ls, const ops::Operand& xq) {
  Tensor xp = dispatcher_->expert_rows(), off = dispatcher_->expert_offsets();
  const int64_t M = xp.size(0);
  Tensor gu = gu_M2F_.rows(0, M), h = h_rows(M), yp = yp_MD_.rows(0, M);
  Tensor dyp = dyp_MD_.rows(0, M), dh = dh_MF_.rows(0, M), dgu = dgu_M2F_.rows(0, M),
         dxp = dxp_MD_.rows(0, M);
  if (stage == MoeStage::kSend) {
    // output gradients travel to the experts while the shared expert's backward runs
    dispatcher_->combine_backward_start(dy_ND, yp, gates_NK_, dgates_NK_);
    if (shared_) {
      TraceRecorder::Span span(trace_, trace_lane_, "shared expert bwd", trace::kExperts);
      shared_->backward(dy_ND, x_ND, dx_ND, false, xq);
    } else {
      ops::fill(dx_ND, 0.0);
    }
    return;
  }
  if (stage == MoeStage::kExperts) {
    dispatcher_->combine_backward_finish(dyp);
    const ops::Operand dypq = expert_operand(dyp_q_, M), dguq = expert_operand(dgu_q_, M),
                       xpq = expert_operand(xp_q_, M), hq = expert_operand(h_q_, M);
    if (!dypq.empty() && !dispatcher_->writes_expert_operands()) ops::quantize_operand(dyp, dypq);
    const int64_t S = dispatcher_->segments_per_expert();
    // the experts' weight gradients: summed into the weights', or kept apart per source
    Tensor& dw_down = down_parts_.empty() ? w_down_->grad : down_parts_;
    Tensor& dw_gate_up = gate_up_parts_.empty() ? w_gate_up_->grad : gate_up_parts_;
    TraceRecorder::Span experts(trace_, trace_lane_, "experts bwd", trace::kExperts);
    grouped_linear_backward(wgrad_, dyp, h, off, w_down_->value, dh, dw_down,
                            {.segments_per_expert = S,
                             .precision = lin_,
                             .wq = w_down_->operands(),
                             .xq = &hq,
                             .dyq = &dypq});
    ops::swiglu_backward(dh, gu, dgu, dguq);
    grouped_linear_backward(wgrad_, dgu, xp, off, w_gate_up_->value, dxp, dw_gate_up,
                            {.segments_per_expert = S,
                             .precision = lin_,
                             .wq = w_gate_up_->operands(),
                             .xq = &xpq,
                             .dyq = &dguq,
                             .x_fp4_amax = dispatcher_->segment_amax()});
    experts.end();
    // input gradients travel back while the router's backward runs: gates, then the auxiliary
    // losses, then the gate projection
    dispatcher_->dispatch_backward_start(dxp);
    TraceRecorder::Span router(trace_, trace_lane_, "router bwd", trace::kRouter);
    ops::router_backward(dgates_NK_, scores_NE_, idx_NK_, spec_, dlogits_NE_);
    if (ls.balance_alpha != 0.0)
      ops::balance_loss(scores_NE_, idx_NK_, B_, T_, ls.balance_alpha * ls.grad_scale, dlogits_NE_);
    if (ls.z_loss_coef != 0.0) ops::z_loss(logits_NE_, ls.z_loss_coef * ls.grad_scale, dlogits_NE_);
    linear_backward(wgrad_, dlogits_NE_, x_ND, gate_->value, dx_ND, gate_->grad,
                    {.accumulate = true});
    return;
  }
  dispatcher_->dispatch_backward_finish(dx_ND);
}

}  // namespace moet
