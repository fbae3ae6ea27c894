#include "model/model.h"

#include <cstring>

#include "core/trace.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/local_dispatcher.h"
#include "model/rope.h"
#include "model/vocab_parallel.h"
#include "model/weight_grads.h"

namespace moet {

Model::Model(const ModelConfig& c, const ModelSpec& spec)
    : cfg_(c),
      precision_(spec.shared ? spec.shared->precision() : spec.precision),
      B_(spec.micro_batch),
      T_(spec.seq_len),
      lw_(spec.loss_weights),
      part_(spec.shared ? spec.shared->part() : spec.part),
      tp_(spec.shared ? spec.shared->tp_ : spec.tp),
      recompute_plan_(spec.shared ? spec.shared->recompute_plan() : spec.recompute),
      shared_(spec.shared) {
  MOET_ASSERT(!(spec.shared && spec.store));
  const int64_t B = B_, T = T_;
  ParamStore* const store = spec.store;
  DispatcherFactory dispatchers = spec.dispatchers;
  if (part_.end_layer < 0) part_.end_layer = c.num_hidden_layers;
  MOET_ASSERT(0 <= part_.first_layer && part_.first_layer <= part_.end_layer &&
              part_.end_layer <= c.num_hidden_layers);
  if (store) store_ = store;
  if (shared_) params_.bind(shared_->params());
  ParamStore& ps = *store_;
  MOET_CHECK(B > 0 && T > 0, "micro-batch and sequence length must be positive");
  MOET_CHECK(T <= c.max_position_embeddings, "sequence length ", T,
             " exceeds max_position_embeddings (", c.max_position_embeddings, ")");
  if (!dispatchers) dispatchers = [](int64_t e) { return std::make_unique<LocalDispatcher>(e); };
  tp_.seq_len = T;
  MOET_CHECK(!tp_.sequence_parallel || (tp_.parts > 1 && T % tp_.parts == 0), "sequence length ", T,
             " does not divide over ", tp_.parts, " sequence-parallel ranks");

  const int64_t D = c.hidden_size, V = tp_.local(c.vocab_size, "vocabulary");
  const WeightShard vocab_part = tp_.shard(0);
  const bool mtp = part_.loss && c.num_nextn_predict_layers > 0;
  // The MTP modules embed their inputs: without the embedding slot they read a replica (or,
  // on the rank of the embedding's part, the embedding) and hand their gradients to that part.
  const bool hand_off = mtp && !part_.embedding;
  const bool replica = hand_off && !part_.embedding_on_rank;
  MOET_CHECK(!(c.tie_word_embeddings && part_.loss && !part_.embedding),
             "pipeline stages with tie_word_embeddings are not supported: the loss stage would "
             "train a copy of the embedding");
  if (part_.embedding || mtp) {
    embed_ = ps.declare("model.embed_tokens.weight", {V, D}, Init::Normal, true, !replica);
    if (tp_.active()) ps.set_shard(embed_, vocab_part);
    if (!part_.embedding_on_rank) embed_->replica = replica;
  }
  for (int64_t l = part_.first_layer; l < part_.end_layer; ++l) {
    bool moe = c.is_moe_layer(l);
    blocks_.push_back(std::make_unique<DecoderBlock>(
        c, ps, "model.layers." + std::to_string(l) + ".", moe,
        moe ? dispatchers(c.n_routed_experts) : nullptr, precision_, l, tp_));
    if (moe) moe_layers_.push_back(blocks_.back()->moe());
  }
  if (part_.loss) {
    lm_head_ =
        c.tie_word_embeddings ? embed_ : ps.declare("lm_head.weight", {V, D}, Init::Normal, true);
    if (tp_.active() && lm_head_ != embed_) ps.set_shard(lm_head_, vocab_part);
    head_ = std::make_unique<LmHead>(c.rms_norm_eps, D, ps, "model.norm.weight", lm_head_,
                                     precision_.head(), tp_);
    for (int64_t k = 1; k <= c.num_nextn_predict_layers; ++k) {
      std::string p = "model.layers." + std::to_string(c.num_hidden_layers + k - 1) + ".";
      mtp_.push_back(std::make_unique<MtpModule>(
          c, ps, p, k, embed_, lm_head_, c.mtp_is_moe() ? dispatchers(c.n_routed_experts) : nullptr,
          precision_, tp_));
      if (c.mtp_is_moe()) moe_layers_.push_back(mtp_.back()->block().moe());
    }
  }
  if (!shared_ && !store) params_.allocate();
  const int64_t n = num_layers();
  for (int64_t l = 0; l < n; ++l) group_start_.push_back(recompute_plan_.group_start(l, n));
  // Plan once to size the arenas, then again to place every buffer in them.
  Arena act = Arena::planning(), scratch = Arena::planning(), again = Arena::planning();
  plan_all(act, scratch, again);
  act_ = Arena(act.used());
  scratch_ = Arena(scratch.used());
  recompute_ = Arena(again.used());
  plan_all(act_, scratch_, recompute_);
  if (hand_off)
    for (size_t k = 0; k < mtp_.size(); ++k) mtp_[k]->export_embedding_grad(&mtp_de_[k]);
  fill_rope_tables(c, rope_.cos_TR2, rope_.sin_TR2);
  rope_.softmax_scale = attention_softmax_scale(c);
}

Model::~Model() = default;

void Model::plan_all(Arena& act, Arena& scratch, Arena& recompute) {
  // the residual stream: this part's tokens under sequence parallelism
  const int64_t N = B_ * T_, D = cfg_.hidden_size, shard = tp_.tokens(N);
  act.reset();
  rope_.cos_TR2 = act.alloc_f32({T_, cfg_.qk_rope_head_dim / 2});
  rope_.sin_TR2 = act.alloc_f32({T_, cfg_.qk_rope_head_dim / 2});
  tokens_BT1_ = act.alloc_i32({B_, T_ + 1});
  inputs_N_ = act.alloc_i32({N});
  targets_N_ = act.alloc_i32({N});
  hidden_.clear();
  for (size_t l = 0; l <= blocks_.size(); ++l) hidden_.push_back(act.alloc_f32({shard, D}));
  dh_a_ND_ = act.alloc_f32({shard, D});
  dh_b_ND_ = act.alloc_f32({shard, D});
  dmtp_a_ND_ = act.alloc_f32({shard, D});
  dmtp_b_ND_ = act.alloc_f32({shard, D});
  // pipeline hand-off of the MTP modules' embedding gradients (ModelPart)
  mtp_de_.clear();
  if (part_.embedding != part_.loss && cfg_.num_nextn_predict_layers > 0) {
    for (int64_t k = 0; k < cfg_.num_nextn_predict_layers; ++k)
      mtp_de_.push_back(act.alloc_f32({shard, D}));
    mtp_tok_N_ = act.alloc_i32({N});
  }
  // The decoder layers and the MTP modules' blocks: what recomputation makes again goes into one
  // region that every layer (selective) or group of layers (full) reuses.
  size_t scratch_needed = 0;
  RecomputeRegion region(recompute);
  const RecomputeGranularity granularity = recompute_plan_.granularity;
  // The workspace of a layer that starts a recompute group (group == -1: kept whole).
  auto layer_workspace = [&](bool starts, int64_t group) {
    if (granularity == RecomputeGranularity::kSelective || starts) region.start_layer();
    Workspace ws(group >= 0 ? region.arena() : act, scratch, B_, T_);
    ws.wgrad = &wgrad_;
    if (granularity == RecomputeGranularity::kSelective)
      ws.recompute = &region, ws.modules = recompute_plan_.modules;
    ws.recompute_whole = group >= 0;
    return ws;
  };
  for (size_t l = 0; l < blocks_.size(); ++l) {
    scratch.reset();
    Workspace ws = layer_workspace(group_start_[l] == int64_t(l), group_start_[l]);
    blocks_[l]->plan(ws);
    scratch_needed = std::max(scratch_needed, scratch.used());
  }
  if (head_) {
    scratch.reset();
    Workspace ws(act, scratch, B_, T_);
    ws.wgrad = &wgrad_;
    head_->plan(ws);
    scratch_needed = std::max(scratch_needed, scratch.used());
  }
  // an MTP module's block: a layer of its own (full: recomputed whole, whatever the method)
  const bool full = granularity == RecomputeGranularity::kFull;
  for (auto& m : mtp_) {
    scratch.reset();
    Workspace ws(act, scratch, B_, T_);
    ws.wgrad = &wgrad_;
    Workspace block = layer_workspace(full, full ? 0 : -1);
    m->plan(ws, block);
    scratch_needed = std::max(scratch_needed, scratch.used());
  }
  region.finish();
  recompute_memory_ = RecomputeMemory{region.total_bytes(), region.region_bytes(), {}};
  for (int m = 0; m < kRecomputeModules; ++m)
    recompute_memory_.module_bytes[m] = region.bytes(RecomputeModule(m));
  // A planning arena must report the maximum, not the last part's size.
  if (scratch.is_planning()) {
    scratch.reset();
    scratch.alloc(DType::F32, {int64_t(scratch_needed / sizeof(float))});
  }
}

void Model::set_trace(TraceRecorder* rec) {
  trace_ = rec;
  if (!rec) {
    for (auto& b : blocks_) b->set_trace(nullptr, 0);
    for (auto& m : mtp_) m->block().set_trace(nullptr, 0);
    return;
  }
  trace_lane_ = rec->lane(trace::kComputeLane);
  for (auto& b : blocks_) b->set_trace(rec, trace_lane_);
  for (auto& m : mtp_) m->block().set_trace(rec, trace_lane_);
  fwd_names_.clear();
  bwd_names_.clear();
  for (size_t l = 0; l < blocks_.size() + mtp_.size(); ++l) {
    std::string what = l < blocks_.size()
                           ? "layer " + std::to_string(part_.first_layer + int64_t(l))
                           : "mtp " + std::to_string(l - blocks_.size() + 1);
    fwd_names_.push_back(rec->intern(what + " forward"));
    bwd_names_.push_back(rec->intern(what + " backward"));
  }
}

void Model::init_parameters(uint64_t seed) { params().initialize(seed, cfg_.initializer_range); }

LossBreakdown Model::forward(const int32_t* seq, double grad_scale) {
  forward_begin(seq, grad_scale);
  for (int64_t l = 0; l < num_layers(); ++l)
    for (MoeStage stage : kMoeStages) forward_stage(l, stage);
  return forward_end();
}

void Model::forward_begin(const int32_t* seq, double grad_scale) {
  head_grad_scale_ = grad_scale;
  std::memcpy(tokens_BT1_.ptr, seq, tokens_BT1_.bytes());
  int32_t* in = inputs_N_.i32();
  int32_t* tgt = targets_N_.i32();
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      int32_t tok = seq[b * (T_ + 1) + t], next = seq[b * (T_ + 1) + t + 1];
      MOET_CHECK(tok >= 0 && tok < cfg_.vocab_size && next >= 0 && next < cfg_.vocab_size,
                 "token id out of range [0, ", cfg_.vocab_size, ")");
      in[b * T_ + t] = tok;
      tgt[b * T_ + t] = next;
    }
  if (part_.embedding) vocab_parallel_embedding_forward(tp_, inputs_N_, embed_->value, hidden_[0]);
}

void Model::forward_stage(int64_t l, MoeStage stage) {
  TraceRecorder::Span span(trace_, trace_lane_, trace_ ? fwd_names_[l] : nullptr, trace::kLayer);
  blocks_[l]->forward_stage(stage, hidden_[l], hidden_[l + 1], rope_);
}

LossBreakdown Model::forward_end() {
  LossBreakdown r;
  double mtp_w = mtp_.empty() ? 0.0 : lw_.mtp_lambda / double(mtp_.size());
  if (head_) {
    TraceRecorder::Span span(trace_, trace_lane_, "lm head forward", trace::kHead);
    r.lm_loss = head_->forward(hidden_.back(), targets_N_, head_grad_scale_);
  }
  const Tensor* h_prev = &hidden_.back();
  for (size_t k = 0; k < mtp_.size(); ++k) {
    auto& m = mtp_[k];
    TraceRecorder::Span span(trace_, trace_lane_, trace_ ? fwd_names_[blocks_.size() + k] : nullptr,
                             trace::kLayer);
    r.mtp_loss += m->forward(*h_prev, tokens_BT1_.i32(), rope_, mtp_w * head_grad_scale_);
    h_prev = &m->output();
  }
  for (MoeLayer* moe : moe_layers_) {
    r.balance_loss += moe->last_balance_loss();
    r.z_loss += moe->last_z_loss();
  }
  r.loss = total_loss(r);
  return r;
}

double Model::total_loss(const LossBreakdown& r) const {
  const double mtp_w = cfg_.num_nextn_predict_layers == 0
                           ? 0.0
                           : lw_.mtp_lambda / double(cfg_.num_nextn_predict_layers);
  return r.lm_loss + mtp_w * r.mtp_loss + lw_.balance_alpha * r.balance_loss +
         lw_.z_loss_coef * r.z_loss;
}

void Model::forward_cached(const int32_t* tokens_T, KvCache& cache, Tensor& logits_RV) {
  MOET_CHECK(B_ == 1 && part_.embedding && part_.loss && part_.first_layer == 0 &&
                 part_.end_layer == cfg_.num_hidden_layers && !tp_.sequence_parallel,
             "decoding with a KV cache needs a whole model with one sequence per micro-batch "
             "(without sequence parallelism)");
  const int64_t pos = cache.length(), R = logits_RV.size(0);
  MOET_CHECK(pos + T_ <= cache.capacity(), "the KV cache holds ", cache.capacity(),
             " positions: ", pos, " + ", T_, " do not fit");
  MOET_ASSERT(R >= 1 && R <= T_ && logits_RV.size(1) == cfg_.vocab_size);
  int32_t* in = inputs_N_.i32();
  for (int64_t t = 0; t < T_; ++t) {
    MOET_CHECK(tokens_T[t] >= 0 && tokens_T[t] < cfg_.vocab_size, "token id ", tokens_T[t],
               " out of range [0, ", cfg_.vocab_size, ")");
    in[t] = tokens_T[t];
  }
  vocab_parallel_embedding_forward(tp_, inputs_N_, embed_->value, hidden_[0]);
  const RopeCache rope = cache.rope_at(pos, T_);
  for (int64_t l = 0; l < num_layers(); ++l)
    blocks_[l]->forward_cached(hidden_[l], hidden_[l + 1], rope, cache.layer(l), pos);
  head_->logits_of(hidden_.back().rows(T_ - R, T_), logits_RV);
  cache.advance(T_);
}

void Model::backward(double grad_scale) {
  backward_begin(grad_scale);
  for (int64_t l = num_layers(); l-- > 0;)
    for (MoeStage stage : kMoeStages) backward_stage(l, stage);
  backward_end();
}

void Model::backward_begin(double grad_scale) {
  MOET_CHECK(head_grad_scale_ == 0 || head_grad_scale_ == grad_scale, "backward with scale ",
             grad_scale, " after a forward announced ", head_grad_scale_);
  head_grad_scale_ = 0;
  ls_ = LossScales{grad_scale, lw_.balance_alpha, lw_.z_loss_coef};
  const LossScales& ls = ls_;
  double mtp_w = mtp_.empty() ? 0.0 : lw_.mtp_lambda / double(mtp_.size());
  // MTP modules, last to first: module k's input gradient is module k-1's output gradient.
  Tensor* d_out = nullptr;  // gradient into the current module's output from the next one
  Tensor* d_in = &dmtp_a_ND_;
  Tensor none;
  for (size_t i = mtp_.size(); i-- > 0;) {
    const Tensor& h_prev = i == 0 ? hidden_.back() : mtp_[i - 1]->output();
    ops::fill(*d_in, 0.0);
    TraceRecorder::Span span(trace_, trace_lane_, trace_ ? bwd_names_[blocks_.size() + i] : nullptr,
                             trace::kLayer);
    mtp_[i]->backward(h_prev, d_out ? *d_out : none, mtp_w, *d_in, rope_, ls);
    gradients_done(cfg_.num_hidden_layers + int64_t(i));
    d_out = d_in;
    d_in = d_in == &dmtp_a_ND_ ? &dmtp_b_ND_ : &dmtp_a_ND_;
  }
  if (!head_) return;  // a pipeline stage: the caller wrote output_grad()
  // main head; the first MTP module's input gradient joins the final hidden state's.
  Tensor& dh = layer_output_grad(num_layers() - 1);
  TraceRecorder::Span span(trace_, trace_lane_, "lm head backward", trace::kHead);
  head_->backward(hidden_.back(), targets_N_, ls.grad_scale, dh, false);
  if (d_out) ops::add_inplace(dh, *d_out, 1.0);
}

// Gradients of the hidden states alternate between two buffers: layer l reads its output's
// gradient from one and writes its input's into the other.
Tensor& Model::layer_output_grad(int64_t l) {
  return (num_layers() - 1 - l) % 2 == 0 ? dh_a_ND_ : dh_b_ND_;
}

void Model::recompute_before_backward(int64_t l) {
  if (recompute_plan_.granularity != RecomputeGranularity::kFull) {
    blocks_[l]->recompute(hidden_[l], rope_);  // its selected modules (if any)
    return;
  }
  // full: a group's layers, all of them, before the backward of its last layer
  const int64_t g = group_start_[l];
  if (g < 0 || (l + 1 < num_layers() && group_start_[l + 1] == g)) return;
  for (int64_t k = g; k <= l; ++k) blocks_[k]->recompute(hidden_[k], rope_);
}

void Model::backward_stage(int64_t l, MoeStage stage) {
  TraceRecorder::Span span(trace_, trace_lane_, trace_ ? bwd_names_[l] : nullptr, trace::kLayer);
  if (stage == kFirstMoeStage) recompute_before_backward(l);
  Tensor& dout = layer_output_grad(l);
  Tensor& din = (num_layers() - 1 - l) % 2 == 0 ? dh_b_ND_ : dh_a_ND_;
  blocks_[l]->backward_stage(stage, dout, hidden_[l], din, false, rope_, ls_);
  if (stage == kLastMoeStage) gradients_done(part_.first_layer + l);
}

void Model::backward_end() {
  if (!part_.embedding) return;  // a pipeline stage: the caller sends input_grad()
  // The MTP modules' embedding gradients, last module first, as their backward adds them in
  // one process.
  if (!part_.loss)
    for (size_t k = mtp_de_.size(); k-- > 0;) {
      MtpModule::shifted_tokens(tokens_BT1_.i32(), B_, T_, int64_t(k) + 1, mtp_tok_N_.i32(),
                                nullptr);
      vocab_parallel_embedding_backward(tp_, mtp_tok_N_, mtp_de_[k], embed_->grad);
    }
  vocab_parallel_embedding_backward(tp_, inputs_N_, input_grad(), embed_->grad);
}

}  // namespace moet

namespace moet {

void Model::gradients_done(int64_t layer) {
  if (wgrad_.deferring())
    held_hooks_.back().push_back(layer);
  else if (hook_)
    hook_(layer);
}

void Model::defer_weight_gradients(bool on) {
  if (on && !wgrad_.deferring()) held_hooks_.emplace_back();
  wgrad_.set_deferring(on);
}

void Model::weight_gradients() {
  MOET_CHECK(!held_hooks_.empty() && !(wgrad_.deferring() && held_hooks_.size() == 1),
             "Model::weight_gradients: no deferred backward to finish");
  wgrad_.run();
  const std::vector<int64_t> layers = std::move(held_hooks_.front());
  held_hooks_.pop_front();
  if (hook_)
    for (int64_t l : layers) hook_(l);
}

}  // namespace moet
