#include "model/block.h"

#include <algorithm>
#include <optional>

#include "core/trace.h"
#include "kernels/ops.h"
#include "model/operands.h"
#include "model/sequence_parallel.h"

namespace moet {

DecoderBlock::DecoderBlock(const ModelConfig& c, ParamStore& ps, const std::string& p, bool moe,
                           std::unique_ptr<TokenDispatcher> dispatcher,
                           const PrecisionPolicy& precision, int64_t layer,
                           const TensorParallel& tp)
    : tp_(tp),
      eps_(c.rms_norm_eps),
      lin_(precision.decoder(layer, c.num_hidden_layers)),
      in_norm_(ps.declare(p + "input_layernorm.weight", {c.hidden_size}, Init::Ones, false)),
      post_norm_(
          ps.declare(p + "post_attention_layernorm.weight", {c.hidden_size}, Init::Ones, false)),
      attn_(c, ps, p + "self_attn.", precision.decoder(layer, c.num_hidden_layers),
            precision.attention(), tp) {
  const ops::LinearPrecision lin = precision.decoder(layer, c.num_hidden_layers);
  MOET_CHECK(!(moe && tp.sequence_parallel), "MoE layers under sequence parallelism are not built");
  if (moe)
    moe_ = std::make_unique<MoeLayer>(c, ps, p + "mlp.", std::move(dispatcher), lin,
                                      precision.combine(), tp);
  else
    mlp_ = std::make_unique<SwiGluMlp>(c.hidden_size, c.intermediate_size, ps, p + "mlp.", lin, tp);
}

void DecoderBlock::set_trace(TraceRecorder* rec, int lane) {
  trace_ = rec;
  trace_lane_ = lane;
  if (moe_) moe_->set_trace(rec, lane);
}

void DecoderBlock::plan(Workspace& ws) {
  const int64_t N = ws.N(), D = in_norm_->value.size(0), shard = tp_.tokens(N);
  // the input norm's output is read only by attention's projections; the post-attention norm's
  // also by the router of an MoE layer (fp32)
  // (--recompute-modules layernorm: both norms' outputs made again before backward)
  recompute_ = ws.recompute ? ws.modules : RecomputeModules{};
  recompute_whole_ = ws.recompute_whole;
  // (attention reads its input on this part's tokens under sequence parallelism, the FFN every
  // token's)
  const GemmInput xn = plan_gemm_input(ws.kept(RecomputeModule::kLayernorm), shard, D, lin_);
  xn_ND_ = xn.values, xn_q_ = xn.q;
  rstd1_N_ = ws.act.alloc_f32({shard});
  a_ND_ = ws.act.alloc_f32({shard, D});
  if (moe_) {
    an_ND_ = ws.kept(RecomputeModule::kLayernorm).alloc_f32({N, D});
    an_q_ = plan_input_operand(ws.kept(RecomputeModule::kLayernorm), N, D, lin_);
    if (!moe_->has_shared_expert()) an_q_.cols = {};  // only the shared expert's wgrad reads it
  } else if (tp_.sequence_parallel) {
    // kept: the norm's output on this part's tokens; the FFN's gathered input is a temporary,
    // gathered again for its backward (as Megatron keeps a column-parallel input's shard)
    an_shard_ND_ = ws.kept(RecomputeModule::kLayernorm).alloc_f32({shard, D});
    const GemmInput an = plan_gemm_input(ws.scratch, N, D, lin_);
    an_ND_ = an.values, an_q_ = an.q;
  } else {
    const GemmInput an = plan_gemm_input(ws.kept(RecomputeModule::kLayernorm), N, D, lin_);
    an_ND_ = an.values, an_q_ = an.q;
  }
  rstd2_N_ = ws.act.alloc_f32({shard});
  da_ND_ = ws.scratch.alloc_f32({shard, D});
  dxn_ND_ = ws.scratch.alloc_f32({shard, D});
  da_q_ = plan_grad_operand(ws.scratch, N, D, lin_);  // da is also the residual's gradient
  if (tp_.sequence_parallel) {
    staging_ND_ = ws.scratch.alloc_f32({N, D});
    dout_all_ND_ = ws.scratch.alloc_f32({N, D});
    da_all_ND_ = ws.scratch.alloc_f32({N, D});
  }
  // Attention's temporaries and the FFN's are never in use at once (attention runs before the
  // FFN forward and after it backward): the same bytes.
  const size_t own = ws.scratch.used();
  attn_.plan(ws);
  const size_t attention_end = ws.scratch.used();
  ws.scratch.seek(own);
  Workspace ffn = ws.inside(moe_ ? RecomputeModule::kMoe : RecomputeModule::kMlp);
  if (moe_)
    moe_->plan(ffn);
  else
    mlp_->plan(ffn);
  ws.scratch.seek(std::max(attention_end, ws.scratch.used()));
}

void DecoderBlock::recompute(const Tensor& in_ND, const RopeCache& rope) {
  if (recompute_.empty() && !recompute_whole_) return;
  TraceRecorder::Span span(trace_, trace_lane_, "recompute", trace::kRecompute);
  if (recompute_whole_) {
    std::optional<MoeLayer::Recomputing> again;
    if (moe_) again.emplace(*moe_);
    for (MoeStage stage : kMoeStages)
      forward_stage(stage, in_ND, da_ND_, rope);  // da: written first in backward
    return;
  }
  if (recompute_.has(RecomputeModule::kLayernorm)) {
    ops::rmsnorm_forward(in_ND, in_norm_->value, eps_, xn_ND_, rstd1_N_, xn_q_);
    post_attention_norm();
  }
  attn_.recompute(recompute_, rope);
  if (moe_) {
    moe_->recompute(recompute_, an_ND_, dxn_ND_, an_q_);  // dxn: written first in backward
  } else if (recompute_.has(RecomputeModule::kMlp)) {
    if (!recompute_.has(RecomputeModule::kLayernorm)) gather_ffn_input();
    mlp_->forward_activation(an_ND_, an_q_);
  }
}

void DecoderBlock::forward(const Tensor& in_ND, Tensor& out_ND, const RopeCache& rope) {
  for (MoeStage stage : kMoeStages) forward_stage(stage, in_ND, out_ND, rope);
}

void DecoderBlock::forward_stage(MoeStage stage, const Tensor& in_ND, Tensor& out_ND,
                                 const RopeCache& rope) {
  if (stage == kFirstMoeStage) attention_part(in_ND, rope, nullptr, 0);
  if (moe_) {
    moe_->forward_stage(stage, an_ND_, out_ND, an_q_);
  } else if (stage == kFirstMoeStage) {
    TraceRecorder::Span span(trace_, trace_lane_, "mlp fwd", trace::kMlp);
    mlp_->forward(an_ND_, out_ND, false, an_q_);
  }
  if (stage == kLastMoeStage) ops::add(out_ND, a_ND_, out_ND);
}

void DecoderBlock::post_attention_norm() {
  if (!tp_.sequence_parallel)
    return ops::rmsnorm_forward(a_ND_, post_norm_->value, eps_, an_ND_, rstd2_N_, an_q_);
  ops::rmsnorm_forward(a_ND_, post_norm_->value, eps_, an_shard_ND_, rstd2_N_);
  gather_ffn_input();
}

void DecoderBlock::gather_ffn_input() {
  if (tp_.sequence_parallel) sp_gather_input(tp_, an_shard_ND_, {an_ND_, an_q_}, staging_ND_);
}

void DecoderBlock::attention_part(const Tensor& in_ND, const RopeCache& rope, LatentCache* cache,
                                  int64_t pos) {
  MOET_ASSERT(!cache || !tp_.sequence_parallel);
  ops::rmsnorm_forward(in_ND, in_norm_->value, eps_, xn_ND_, rstd1_N_, xn_q_);
  TraceRecorder::Span span(trace_, trace_lane_, "attention fwd", trace::kAttention);
  if (cache)
    attn_.forward_cached(xn_ND_, a_ND_, rope, *cache, pos, xn_q_);
  else
    attn_.forward(xn_ND_, a_ND_, rope, xn_q_);
  span.end();
  ops::add(a_ND_, in_ND, a_ND_);
  post_attention_norm();
}

void DecoderBlock::forward_cached(const Tensor& in_ND, Tensor& out_ND, const RopeCache& rope,
                                  LatentCache& cache, int64_t pos) {
  attention_part(in_ND, rope, &cache, pos);
  if (moe_)
    moe_->forward(an_ND_, out_ND, an_q_);  // routing exactly as in training: same gates, bias
  else
    mlp_->forward(an_ND_, out_ND, false, an_q_);
  ops::add(out_ND, a_ND_, out_ND);
}

void DecoderBlock::backward(const Tensor& dout_ND, const Tensor& in_ND, Tensor& din_ND,
                            bool accumulate_din, const RopeCache& rope, const LossScales& ls) {
  for (MoeStage stage : kMoeStages)
    backward_stage(stage, dout_ND, in_ND, din_ND, accumulate_din, rope, ls);
}

void DecoderBlock::backward_stage(MoeStage stage, const Tensor& dout_ND, const Tensor& in_ND,
                                  Tensor& din_ND, bool accumulate_din, const RopeCache& rope,
                                  const LossScales& ls) {
  // out = a + ffn(norm(a)): da = dout + norm'ᵀ ffn'ᵀ dout. Under sequence parallelism dout, a
  // and in are this part's tokens: the FFN reads dout gathered and reduce-scatters its input
  // gradient; attention reads da gathered and gives its input gradient on the shard.
  const bool sp = tp_.sequence_parallel;
  Tensor& dffn = dxn_ND_;
  if (moe_) {
    moe_->backward_stage(stage, dout_ND, an_ND_, dxn_ND_, ls, an_q_);
  } else if (stage == kLastMoeStage) {
    TraceRecorder::Span span(trace_, trace_lane_, "mlp bwd", trace::kMlp);
    if (sp) sp_gather(tp_, dout_ND, dout_all_ND_);
    // the FFN's input again (a temporary: under full recomputation of a group of layers, the
    // later layers' work has overwritten this one's recomputed gather)
    gather_ffn_input();
    mlp_->backward(sp ? dout_all_ND_ : dout_ND, an_ND_, dffn, false, an_q_);
  }
  if (stage != kLastMoeStage) return;
  ops::copy(dout_ND, da_ND_);
  norm_backward(tp_, dffn, a_ND_, post_norm_->value, rstd2_N_, da_ND_, true, post_norm_->grad,
                sp ? ops::Operand{} : da_q_);
  // a = in + attn(norm(in))
  if (sp) sp_gather_input(tp_, da_ND_, {da_all_ND_, da_q_}, staging_ND_);
  {
    TraceRecorder::Span span(trace_, trace_lane_, "attention bwd", trace::kAttention);
    attn_.backward(sp ? da_all_ND_ : da_ND_, xn_ND_, dxn_ND_, rope, da_q_, xn_q_);
  }
  if (accumulate_din)
    ops::add_inplace(din_ND, da_ND_, 1.0);
  else
    ops::copy(da_ND_, din_ND);
  norm_backward(tp_, dxn_ND_, in_ND, in_norm_->value, rstd1_N_, din_ND, true, in_norm_->grad);
}

}  // namespace moet
