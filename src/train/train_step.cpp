#include "train/train_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/tree_sum.h"
#include "kernels/ops.h"
#include "optim/expert_bias.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_executor.h"
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
  MOET_ASSERT(sequences_ == 0 && !lane2_);  // refused by the trainer's checks
  MOET_ASSERT(dp_ != nullptr);
  pipeline_ = pipeline;
  pp_ = pp;
  pp_scratch_.resize(size_t(pp->size()));
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
  if (sequences_ > 0) {
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
  if (dp_) {
    dp_->reduce_expert_loads(moe_);
    r.grad_norm = dp_->optimizer_step(adamw_, r.lr);
  } else {
    r.grad_norm = adamw_.step(r.lr);
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
    auto sum = [&](double LossBreakdown::*field) {
      return tree_sum<double>(0, int(S), [&](int s) { return leaf_losses_[size_t(s)].*field; });
    };
    LossBreakdown l{sum(&LossBreakdown::loss), sum(&LossBreakdown::lm_loss),
                    sum(&LossBreakdown::mtp_loss), sum(&LossBreakdown::balance_loss),
                    sum(&LossBreakdown::z_loss)};
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
  const int64_t ranks = dp_ ? dp_->layout().size() : 1;
  const double inv = 1.0 / double(ranks * grad_accum * S);
  std::memcpy(grads.f32(), accum_.data(), size_t(n) * sizeof(float));
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
  const int stages = DecoderBlock::kStages;
  auto stage = [&](int k, int64_t l, int s) {
    forward ? lanes[k]->forward_stage(l, s) : lanes[k]->backward_stage(l, s);
  };
  if (!interleave_) {
    for (int64_t i = 0; i < layers; ++i)
      for (int k = 0; k < 2; ++k)
        for (int s = 0; s < stages; ++s) stage(k, forward ? i : layers - 1 - i, s);
    return;
  }
  if (!forward) {
    // Backward, layers down, the same pattern: B's last exchange of a layer (its input
    // gradients) travels under A's first stage of the next layer down.
    for (int64_t l = layers; l-- > 0;) {
      stage(0, l, 0);
      if (l + 1 < layers) stage(1, l + 1, stages - 1);
      stage(1, l, 0);
      for (int s = 1; s < stages - 1; ++s) {
        stage(0, l, s);
        stage(1, l, s);
      }
      stage(0, l, stages - 1);
    }
    stage(1, 0, stages - 1);
    return;
  }
  // Forward: A's dispatch travels under B's attention, B's under A's experts, A's combine under
  // B's experts, and B's combine under A's attention of the next layer.
  for (int64_t l = 0; l < layers; ++l) {
    stage(0, l, 0);
    if (l > 0) stage(1, l - 1, stages - 1);
    stage(1, l, 0);
    for (int s = 1; s < stages - 1; ++s) {
      stage(0, l, s);
      stage(1, l, s);
    }
    stage(0, l, stages - 1);
  }
  stage(1, layers - 1, stages - 1);
}

}  // namespace moet
