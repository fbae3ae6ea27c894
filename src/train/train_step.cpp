#include "train/train_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/trace.h"
#include "core/tree_sum.h"
#include "kernels/ops.h"
#include "optim/expert_bias.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_norm.h"
#include "train/expert_source_trees.h"
#include "train/gradient_tree.h"

namespace moet {

StepRunner::StepRunner(Model& model, AdamWConfig adamw, LrSchedule schedule,
                       double bias_update_rate, DataParallel* data_parallel)
    : model_(model),
      adamw_(model.params(), adamw, !(data_parallel && data_parallel->zero1())),
      schedule_(schedule),
      bias_rate_(bias_update_rate),
      dp_(data_parallel),
      moe_(model.moe_layers()) {}

StepRunner::~StepRunner() = default;

namespace {
void add_losses(LossBreakdown& acc, const LossBreakdown& l, double w) {
  acc.loss += l.loss * w;
  acc.lm_loss += l.lm_loss * w;
  acc.mtp_loss += l.mtp_loss * w;
  acc.balance_loss += l.balance_loss * w;
  acc.z_loss += l.z_loss * w;
}
}  // namespace

void StepRunner::set_trace(TraceRecorder* rec) {
  trace_ = rec;
  if (rec) trace_lane_ = rec->lane(trace::kComputeLane);
}

void StepRunner::set_second_lane(Model* lane, bool interleave) {
  MOET_CHECK(sequences_ == 0, "--deterministic does not combine with --a2a-overlap");
  lane2_ = lane;
  interleave_ = interleave;
  for (size_t i = 0; i < model_.moe_layers().size(); ++i)  // the lane's loads join the model's
    merges_.emplace_back(lane->moe_layers()[i], model_.moe_layers()[i]);
}

void StepRunner::set_moe_layers(std::vector<MoeLayer*> layers,
                                std::vector<std::pair<MoeLayer*, MoeLayer*>> merges) {
  moe_ = std::move(layers);
  merges_ = std::move(merges);
}

void StepRunner::set_pipeline(PipelineExecutor* pipeline, Communicator* pp) {
  MOET_ASSERT(!lane2_);  // refused by the trainer's checks
  MOET_ASSERT(dp_ != nullptr);
  pipeline_ = pipeline;
  pp_ = pp;
  pp_scratch_.resize(size_t(pp->size()));
  if (sequences_ > 0) set_pipeline_deterministic();
}

void StepRunner::set_pipeline_deterministic() {
  const ModelConfig& cfg = model_.config();
  const int64_t L = cfg.num_hidden_layers;
  ParamStore& params = model_.params();
  tree_.reset();  // each chunk keeps its own trees
  expert_trees_.reset();
  for (int64_t l = 0; l < L; ++l) decoder_moe_count_ += cfg.is_moe_layer(l) ? 1 : 0;
  moe_count_ = cfg.num_moe_layers();
  for (int64_t c = 0; c < pipeline_->chunks(); ++c) {
    const ModelPart& part = pipeline_->chunk_model(c).part();
    auto mine = [&](const Weight& w) {
      const int64_t g = declaration_group(w.name, L);
      if (g == 0) return part.embedding || (part.loss && w.replica);
      if (g <= L) return part.first_layer <= g - 1 && g - 1 < part.end_layer;
      return part.loss;
    };
    ChunkTree t;
    t.begin = params.numel();
    int64_t covered = 0;
    for (const Weight& w : params.weights())
      if (mine(w)) {
        t.begin = std::min(t.begin, w.offset);
        t.end = std::max(t.end, w.offset + w.value.numel());
        covered += w.value.numel();
      }
    MOET_ASSERT(covered == t.end - t.begin);  // a chunk's weights are contiguous
    t.tree = std::make_unique<GradientTree>(t.end - t.begin);
    std::vector<std::vector<MoeLayer*>> others;
    for (int64_t k = 1; k < pipeline_->chunk_slots(c); ++k)
      others.push_back(pipeline_->chunk_model(c, k).moe_layers());
    t.experts = std::make_unique<ExpertSourceTrees>(pipeline_->chunk_model(c).moe_layers(), others);
    chunk_trees_.push_back(std::move(t));
  }
  const int64_t S = sequences_, row = 2 + 2 * moe_count_;
  PipelineExecutor::GradientHooks hooks;
  hooks.before = [this](int64_t c, int64_t) {
    ChunkTree& t = chunk_trees_[size_t(c)];
    float* g = model_.params().all_grads().f32();
    std::fill(g + t.begin, g + t.end, 0.0f);
    t.experts->zero();
  };
  hooks.after = [this, S](int64_t c, int64_t j) {
    ChunkTree& t = chunk_trees_[size_t(c)];
    float* g = model_.params().all_grads().f32();
    t.tree->push(g + t.begin);
    t.experts->push();
    if (j % S != S - 1) return;
    // the chunk has every sequence of micro-batch j / S: its sum, over the ranks, accumulated
    t.tree->finish(g + t.begin);
    t.tree->reset();
    t.experts->finish();
    dp_->reduce_gradient_range(t.begin, t.end, 1.0);
    Tensor part(g + t.begin, DType::F32, {t.end - t.begin});
    Tensor acc(accum_.data() + t.begin, DType::F32, {t.end - t.begin});
    if (j / S == 0)
      ops::copy(part, acc);
    else
      ops::add(acc, part, acc);
  };
  hooks.forward_done = [this, row](int64_t, int64_t j, Model& m, const LossBreakdown& l) {
    double* r = seq_losses_.data() + j * row;
    if (m.part().loss) r[0] = l.lm_loss, r[1] = l.mtp_loss;
    // the chunk's MoE layers are its decoder layers' in order, then the MTP modules'
    int64_t first = 0, decoder = 0;
    for (int64_t i = 0; i < m.part().end_layer; ++i)
      (i < m.part().first_layer ? first : decoder) += m.config().is_moe_layer(i) ? 1 : 0;
    for (int64_t i = 0; i < int64_t(m.moe_layers().size()); ++i) {
      const int64_t g = i < decoder ? first + i : decoder_moe_count_ + (i - decoder);
      r[2 + g] = m.moe_layers()[size_t(i)]->last_balance_loss();
      r[2 + moe_count_ + g] = m.moe_layers()[size_t(i)]->last_z_loss();
    }
  };
  pipeline_->set_gradient_hooks(std::move(hooks));
}

LossBreakdown StepRunner::accumulate_deterministic_pipeline(
    int64_t grad_accum, const std::function<const int32_t*(int64_t)>& micro_batch) {
  const int64_t S = sequences_, per_seq = model_.seq_len() + 1, row = 2 + 2 * moe_count_;
  seq_losses_.assign(size_t(grad_accum * S * row), 0.0);
  pipeline_->run_step([&](int64_t j) { return micro_batch(j / S) + (j % S) * per_seq; }, 1.0);
  // every stage filled its part of each sequence's row (the rest is +0)
  pp_->allreduce_sum(seq_losses_.data(), int64_t(seq_losses_.size()));
  LossBreakdown total;
  for (int64_t a = 0; a < grad_accum; ++a) {
    for (int64_t s = 0; s < S; ++s) {  // one process's forward_end, sequence by sequence
      const double* r = seq_losses_.data() + (a * S + s) * row;
      LossBreakdown& l = leaf_losses_[size_t(s)];
      l = LossBreakdown{};
      l.lm_loss = r[0], l.mtp_loss = r[1];
      for (int64_t i = 0; i < moe_count_; ++i) {
        l.balance_loss += r[2 + i];
        l.z_loss += r[2 + moe_count_ + i];
      }
      l.loss = model_.total_loss(l);
    }
    LossBreakdown l = sum_leaf_losses();
    dp_->reduce_losses(l, 1.0);
    add_losses(total, l, 1.0);
  }
  return finish_deterministic(grad_accum, total);
}

void StepRunner::set_deterministic(int64_t sequences) {
  MOET_CHECK(!lane2_, "--deterministic does not combine with --a2a-overlap");
  MOET_CHECK(model_.micro_batch() == 1 && sequences > 0,
             "--deterministic runs one sequence at a time: plan the model for micro-batch 1");
  sequences_ = sequences;
  tree_ = std::make_unique<GradientTree>(model_.params().numel());
  expert_trees_ = std::make_unique<ExpertSourceTrees>(model_.moe_layers());
  accum_.assign(size_t(model_.params().numel()), 0.0f);
  leaf_losses_.resize(size_t(sequences));
}

StepResult StepRunner::run(int64_t step, int64_t grad_accum,
                           const std::function<const int32_t*(int64_t)>& micro_batch) {
  reset_router_stats(moe_);
  for (const auto& [from, into] : merges_) reset_router_stats({from});
  StepResult r;
  if (sequences_ > 0 && pipeline_) {
    r.losses = accumulate_deterministic_pipeline(grad_accum, micro_batch);
  } else if (sequences_ > 0) {
    r.losses = accumulate_deterministic(grad_accum, micro_batch);
  } else {
    if (pipeline_) {
      model_.params().zero_grads();
      dp_->arm();  // the executor reports each block's last micro-batch
      r.losses = pipeline_->run_step(micro_batch, 1.0 / double(grad_accum));
    } else {
      r.losses = accumulate(grad_accum, micro_batch);
    }
    if (dp_) {
      dp_->reduce_gradients();
      dp_->reduce_losses(r.losses);
    }
    if (pp_) {  // each stage computed its layers' part of the losses
      double v[5] = {r.losses.loss, r.losses.lm_loss, r.losses.mtp_loss, r.losses.balance_loss,
                     r.losses.z_loss};
      pp_->allreduce_sum(v, 5);
      r.losses = LossBreakdown{v[0], v[1], v[2], v[3], v[4]};
    }
  }
  // one step's loads, every instance of a layer (the bias they update is shared)
  for (const auto& [from, into] : merges_) {
    std::vector<int64_t>& to = into->stats().load_E;
    const std::vector<int64_t>& add = from->stats().load_E;
    for (size_t e = 0; e < to.size(); ++e) to[e] += add[e];
  }
  r.lr = schedule_.at(step);
  // A non-finite loss would poison the weights: no update (every rank sees the same reduced
  // loss, so all skip together); the trainer decides whether to go on.
  if (!std::isfinite(r.losses.loss)) {
    r.skipped = true;
    return r;
  }
  if (dp_) dp_->reduce_expert_loads(moe_);
  {
    TraceRecorder::Span span(trace_, trace_lane_, "adamw step", trace::kOptimizer);
    r.grad_norm = dp_ ? dp_->optimizer_step(adamw_, r.lr) : adamw_.step(r.lr);
  }
  if (pipeline_) pipeline_->sync_embedding_replica(model_.params());
  model_.params().mark_updated();  // low-precision weight operands are remade on next use
  r.max_expert_load = max_expert_load_ratio(moe_);
  if (pp_) {  // the worst layer of any stage
    pp_->allgather(&r.max_expert_load, sizeof(double), pp_scratch_.data());
    for (double x : pp_scratch_) r.max_expert_load = std::max(r.max_expert_load, x);
  }
  update_expert_bias(moe_, bias_rate_);
  return r;
}

LossBreakdown StepRunner::accumulate_deterministic(
    int64_t grad_accum, const std::function<const int32_t*(int64_t)>& micro_batch) {
  ParamStore& params = model_.params();
  Tensor grads = params.all_grads();
  const int64_t n = params.numel(), S = sequences_, per_seq = model_.seq_len() + 1;
  LossBreakdown total;
  for (int64_t a = 0; a < grad_accum; ++a) {
    tree_->reset();
    for (int64_t s = 0; s < S; ++s) {
      params.zero_grads();
      expert_trees_->zero();
      leaf_losses_[size_t(s)] = model_.forward(micro_batch(a) + s * per_seq, 1.0);
      model_.backward(1.0);
      tree_->push(grads.f32());
      expert_trees_->push();
    }
    tree_->finish(grads.f32());
    expert_trees_->finish();  // expert parallelism: the experts' gradients, source by source
    LossBreakdown l = sum_leaf_losses();
    if (dp_) {  // plain sums over the ranks, in the canonical order
      dp_->reduce_gradients(1.0);
      dp_->reduce_losses(l, 1.0);
    }
    Tensor acc(accum_.data(), DType::F32, {n});
    if (a == 0)
      ops::copy(grads, acc);
    else
      ops::add(acc, grads, acc);
    add_losses(total, l, 1.0);
  }
  return finish_deterministic(grad_accum, total);
}

LossBreakdown StepRunner::sum_leaf_losses() const {
  const int S = int(sequences_);
  auto sum = [&](double LossBreakdown::*field) {
    return tree_sum<double>(0, S, [&](int s) { return leaf_losses_[size_t(s)].*field; });
  };
  return LossBreakdown{sum(&LossBreakdown::loss), sum(&LossBreakdown::lm_loss),
                       sum(&LossBreakdown::mtp_loss), sum(&LossBreakdown::balance_loss),
                       sum(&LossBreakdown::z_loss)};
}

LossBreakdown StepRunner::finish_deterministic(int64_t grad_accum, const LossBreakdown& total) {
  Tensor grads = model_.params().all_grads();
  const int64_t ranks = dp_ ? dp_->layout().size() : 1;
  const double inv = 1.0 / double(ranks * grad_accum * sequences_);
  std::memcpy(grads.f32(), accum_.data(), size_t(grads.numel()) * sizeof(float));
  ops::scale_inplace(grads, inv);
  LossBreakdown mean;
  add_losses(mean, total, inv);
  return mean;
}

LossBreakdown StepRunner::accumulate(int64_t grad_accum,
                                     const std::function<const int32_t*(int64_t)>& micro_batch) {
  model_.params().zero_grads();
  LossBreakdown losses;
  for (int64_t a = 0; a < grad_accum; ++a) {
    const bool last = a + 1 == grad_accum;
    if (!lane2_) {
      // the scale announced to forward: the LM heads take their gradient there
      LossBreakdown l = model_.forward(micro_batch(a), 1.0 / double(grad_accum));
      if (dp_ && last) dp_->arm();  // gradients final: reduce during backward
      model_.backward(1.0 / double(grad_accum));
      add_losses(losses, l, 1.0 / double(grad_accum));
      continue;
    }
    // Two lanes, each half of the micro-batch (the first lane the first half of the sequences);
    // interleaved stage by stage, so one lane's exchanges travel under the other's compute.
    const int32_t* tokens = micro_batch(a);
    const int64_t half = model_.micro_batch() * (model_.seq_len() + 1);
    Model* lanes[2] = {&model_, lane2_};
    const double scale = 1.0 / double(2 * grad_accum);
    lanes[0]->forward_begin(tokens, scale);
    lanes[1]->forward_begin(tokens + half, scale);
    run_stages(lanes, model_.num_layers(), true);
    LossBreakdown l0 = lanes[0]->forward_end(), l1 = lanes[1]->forward_end();
    if (dp_ && last) dp_->arm();
    lanes[0]->backward_begin(scale);
    lanes[1]->backward_begin(scale);
    run_stages(lanes, model_.num_layers(), false);
    lanes[0]->backward_end();
    lanes[1]->backward_end();
    add_losses(losses, l0, scale);
    add_losses(losses, l1, scale);
  }
  return losses;
}

void StepRunner::run_stages(Model* lanes[2], int64_t layers, bool forward) {
  auto stage = [&](int k, int64_t l, MoeStage s) {
    forward ? lanes[k]->forward_stage(l, s) : lanes[k]->backward_stage(l, s);
  };
  if (!interleave_) {
    for (int64_t i = 0; i < layers; ++i)
      for (int k = 0; k < 2; ++k)
        for (MoeStage s : kMoeStages) stage(k, forward ? i : layers - 1 - i, s);
    return;
  }
  // Both lanes' stages between the first and the last, in turn.
  auto middle = [&](int64_t l) {
    for (size_t s = 1; s + 1 < kMoeStages.size(); ++s) {
      stage(0, l, kMoeStages[s]);
      stage(1, l, kMoeStages[s]);
    }
  };
  if (!forward) {
    // Backward, layers down, the same pattern: B's last exchange of a layer (its input
    // gradients) travels under A's first stage of the next layer down.
    for (int64_t l = layers; l-- > 0;) {
      stage(0, l, kFirstMoeStage);
      if (l + 1 < layers) stage(1, l + 1, kLastMoeStage);
      stage(1, l, kFirstMoeStage);
      middle(l);
      stage(0, l, kLastMoeStage);
    }
    stage(1, 0, kLastMoeStage);
    return;
  }
  // Forward: A's dispatch travels under B's attention, B's under A's experts, A's combine under
  // B's experts, and B's combine under A's attention of the next layer.
  for (int64_t l = 0; l < layers; ++l) {
    stage(0, l, kFirstMoeStage);
    if (l > 0) stage(1, l - 1, kLastMoeStage);
    stage(1, l, kFirstMoeStage);
    middle(l);
    stage(0, l, kLastMoeStage);
  }
  stage(1, layers - 1, kLastMoeStage);
}

}  // namespace moet
