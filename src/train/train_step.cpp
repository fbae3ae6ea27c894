#include "train/train_step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/trace.h"
#include "kernels/ops.h"
#include "optim/expert_bias.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_executor.h"

namespace moet {

StepRunner::StepRunner(Model& model, AdamWConfig adamw, LrSchedule schedule,
                       double bias_update_rate, StepPlan plan)
    : model_(model),
      plan_(std::move(plan)),
      adamw_(model.params(), adamw, !(plan_.dp && plan_.dp->zero1())),
      schedule_(schedule),
      bias_rate_(bias_update_rate) {
  if (!plan_.accumulation) plan_.accumulation = plain_accumulation(model, plan_.dp);
  if (plan_.moe_layers.empty()) plan_.moe_layers = model.moe_layers();
  if (plan_.trace) trace_lane_ = plan_.trace->lane(trace::kComputeLane);
  if (plan_.pp) pp_scratch_.resize(size_t(plan_.pp->size()));
}

StepRunner::~StepRunner() = default;

StepResult StepRunner::run(int64_t step, int64_t grad_accum, const MicroBatchFn& micro_batch) {
  std::vector<MoeLayer*>& moe = plan_.moe_layers;
  reset_router_stats(moe);
  for (const auto& [from, into] : plan_.merges) reset_router_stats({from});
  StepResult r;
  ops::set_fp4_step(plan_.seed, step);
  r.losses = plan_.accumulation->run(grad_accum, micro_batch);
  // one step's loads, every instance of a layer (the bias they update is shared)
  for (const auto& [from, into] : plan_.merges) {
    std::vector<int64_t>& to = into->stats().load_E;
    const std::vector<int64_t>& add = from->stats().load_E;
    for (size_t e = 0; e < to.size(); ++e) to[e] += add[e];
    into->stats().balance_loss += from->stats().balance_loss;
    into->stats().forwards += from->stats().forwards;
  }
  r.lr = schedule_.at(step);
  // A non-finite loss would poison the weights: no update (every rank sees the same reduced
  // loss, so all skip together); the trainer decides whether to go on.
  if (!std::isfinite(r.losses.loss)) {
    r.skipped = true;
    return r;
  }
  DataParallel* dp = plan_.dp;
  if (dp) dp->reduce_expert_loads(moe);
  balance_per_layer(r);
  {
    TraceRecorder::Span span(plan_.trace, trace_lane_, "adamw step", trace::kOptimizer);
    r.grad_norm = dp ? dp->optimizer_step(adamw_, r.lr) : adamw_.step(r.lr);
  }
  if (plan_.pipeline) plan_.pipeline->sync_embedding_replica(model_.params());
  model_.params().mark_updated();  // low-precision weight operands are remade on next use
  r.max_expert_load = max_expert_load_ratio(moe);
  if (plan_.pp) {  // the worst layer of any stage
    plan_.pp->allgather(&r.max_expert_load, sizeof(double), pp_scratch_.data());
    for (double x : pp_scratch_) r.max_expert_load = std::max(r.max_expert_load, x);
  }
  update_expert_bias(moe, bias_rate_);
  return r;
}

void StepRunner::balance_per_layer(StepResult& r) {
  const std::vector<MoeLayer*>& moe = plan_.moe_layers;
  const size_t n = size_t(model_.config().num_moe_layers());
  if (n == 0) return;
  balance_scratch_.assign(2 * n, 0.0);
  for (size_t i = 0; i < moe.size(); ++i) {
    const size_t g = plan_.moe_index.empty() ? i : size_t(plan_.moe_index[i]);
    MOET_ASSERT(g < n);
    balance_scratch_[g] += moe[i]->stats().balance_loss;
    balance_scratch_[n + g] += double(moe[i]->stats().forwards);
  }
  // every forward holds as many sequences: the sums over the ranks' forwards give the means
  if (plan_.dp) plan_.dp->layout().world->allreduce_sum(balance_scratch_.data(), int64_t(2 * n));
  if (plan_.pp) plan_.pp->allreduce_sum(balance_scratch_.data(), int64_t(2 * n));
  balance_per_layer_.resize(n);
  for (size_t g = 0; g < n; ++g)
    balance_per_layer_[g] = balance_scratch_[n + g] > 0
                                ? balance_scratch_[g] / balance_scratch_[n + g]
                                : std::numeric_limits<double>::quiet_NaN();
  r.balance_loss_per_layer = balance_per_layer_;
}

}  // namespace moet
