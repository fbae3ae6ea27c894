// One optimizer step: grad_accum micro-batches of forward+backward, clipping, AdamW at the
// scheduled learning rate, then the auxiliary-loss-free expert-bias update.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/gradient_accumulation.h"

namespace moet {

struct StepResult {
  LossBreakdown losses;  // means over the micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double max_expert_load = 0;  // worst layer's max/mean expert load this step
  // Each MoE layer's sequence-wise balance loss (unweighted), in the model's MoE-layer order
  // (the decoder's, then the MTP modules'): the mean over the step's sequences and data-parallel
  // ranks, gathered over the pipeline stages. Its sum is losses.balance_loss (to rounding).
  // Empty on a skipped step; the StepRunner's, valid until its next run (a step allocates
  // nothing).
  std::span<const double> balance_loss_per_layer;
  bool skipped = false;  // the loss was not finite: parameters and optimizer untouched
};

class DataParallel;
class MoeLayer;
class PipelineExecutor;
class TraceRecorder;

// What the layout decided for a step (ParallelRun::step_plan): how the micro-batches become
// gradients, and what the update must synchronise afterwards. Every field has a one-process
// default.
struct StepPlan {
  std::unique_ptr<GradientAccumulation> accumulation;  // null: plain_accumulation(model, dp)
  // null for one process; else the gradient norm and the expert loads are reduced across its
  // ranks. With ZeRO-1 (dp->zero1()) the optimizer keeps no moments of its own: DataParallel
  // steps this rank's shard.
  DataParallel* dp = nullptr;
  Communicator* pp = nullptr;            // --pp: the worst expert load is taken over the stages
  PipelineExecutor* pipeline = nullptr;  // --pp: the embedding replica synced after the update
  // The MoE layers whose router statistics drive the expert-bias update (one instance per layer
  // this rank holds; empty: the model's), and the other instances of those layers (lanes,
  // pipeline slots) whose statistics are added into them each step (from, into).
  std::vector<MoeLayer*> moe_layers;
  std::vector<std::pair<MoeLayer*, MoeLayer*>> merges;
  // Each moe_layers entry's place among the whole model's MoE layers (the decoder's in order,
  // then the MTP modules'); empty: 0, 1, 2, ... (this rank holds every layer).
  std::vector<int64_t> moe_index;
  TraceRecorder* trace = nullptr;  // the optimizer step as a trace::kOptimizer span
  // The run's --seed: with the step, the FP4 recipes' stochastic rounding and Hadamard signs
  // (ops::set_fp4_step before each step's first micro-batch).
  uint64_t seed = 0;
};

class StepRunner {
 public:
  StepRunner(Model& model, AdamWConfig adamw, LrSchedule schedule, double bias_update_rate,
             StepPlan plan = {});
  ~StepRunner();
  StepResult run(int64_t step, int64_t grad_accum, const MicroBatchFn& micro_batch);
  AdamW& optimizer() { return adamw_; }
  const LrSchedule& schedule() const { return schedule_; }

 private:
  Model& model_;
  StepPlan plan_;
  AdamW adamw_;
  LrSchedule schedule_;
  double bias_rate_;
  int trace_lane_ = 0;
  std::vector<double> pp_scratch_;
  std::vector<double> balance_scratch_;    // per MoE layer: balance-loss sums, then forward counts
  std::vector<double> balance_per_layer_;  // what r.balance_loss_per_layer views

  // r.balance_loss_per_layer from the layers' router statistics, reduced over the ranks
  void balance_per_layer(StepResult& r);
};

}  // namespace moet
