// One optimizer step: grad_accum micro-batches of forward+backward, clipping, AdamW at the
// scheduled learning rate, then the auxiliary-loss-free expert-bias update.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"

namespace moet {

struct StepResult {
  LossBreakdown losses;  // means over the micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double max_expert_load = 0;  // worst layer's max/mean expert load this step
  bool skipped = false;        // the loss was not finite: parameters and optimizer untouched
};

class Communicator;
class DataParallel;
class ExpertSourceTrees;
class GradientTree;
class MoeLayer;
class PipelineExecutor;
class TraceRecorder;

class StepRunner {
 public:
  // data_parallel: null for one process; else gradients, norm, losses and expert loads are
  // reduced across its ranks. With ZeRO-1 (data_parallel->zero1()) the optimizer keeps no
  // moments of its own: DataParallel steps this rank's shard.
  StepRunner(Model& model, AdamWConfig adamw, LrSchedule schedule, double bias_update_rate,
             DataParallel* data_parallel = nullptr);
  ~StepRunner();
  // micro_batch(a) returns micro-batch a's B×(T+1) tokens, a < grad_accum.
  StepResult run(int64_t step, int64_t grad_accum,
                 const std::function<const int32_t*(int64_t)>& micro_batch);
  // --a2a-overlap: `lane` (built over this model's parameters, Model's sharing constructor)
  // takes the second half of every micro-batch (its router statistics join the model's); with
  // interleave, the two lanes' stages alternate
  // so each lane's all-to-alls travel under the other lane's compute; without, each layer runs
  // lane by lane (the same arithmetic, bit for bit).
  void set_second_lane(Model* lane, bool interleave);
  // --deterministic: each micro-batch holds `sequences` sequences and the model is planned for
  // one; every sequence's gradient is computed into fresh buffers and the sequences are added
  // in the canonical tree order (GradientTree), reduced over the ranks after every micro-batch
  // (plain sums), accumulated over micro-batches in order and scaled once at the end. Data
  // parallelism over P ranks with a power-of-two micro-batch then gives bitwise what one
  // process gives with a P-times larger micro-batch (docs/parallel.md). Under expert
  // parallelism the routed experts' gradients are added per source rank (ExpertSourceTrees),
  // so that holds too.
  void set_deterministic(int64_t sequences);
  // The MoE layers whose router statistics drive the expert-bias update (one instance per
  // layer this rank holds), and the other instances of those layers (lanes, pipeline slots)
  // whose statistics are added into them each step (from, into). Default: the model's layers.
  void set_moe_layers(std::vector<MoeLayer*> layers,
                      std::vector<std::pair<MoeLayer*, MoeLayer*>> merges);
  // --pp: the micro-batches run through the pipeline executor; losses are summed over the
  // pipeline group `pp` (each stage computes its part), the parameters are this stage's. With
  // --deterministic (set first) every sequence is a pipeline micro-batch: each chunk adds its
  // sequences' gradients in its own GradientTree, and reduces and accumulates them when it has
  // seen a micro-batch's B sequences; the losses are put together per sequence, layer by layer,
  // as one process adds them (docs/pipeline.md).
  void set_pipeline(PipelineExecutor* pipeline, Communicator* pp);
  // Records the optimizer step as a trace::kOptimizer span on the recorder's "compute" lane.
  void set_trace(TraceRecorder* rec);
  AdamW& optimizer() { return adamw_; }
  const LrSchedule& schedule() const { return schedule_; }

 private:
  Model& model_;
  AdamW adamw_;
  TraceRecorder* trace_ = nullptr;
  int trace_lane_ = 0;
  LrSchedule schedule_;
  double bias_rate_;
  DataParallel* dp_;
  Model* lane2_ = nullptr;
  std::vector<MoeLayer*> moe_;
  std::vector<std::pair<MoeLayer*, MoeLayer*>> merges_;
  PipelineExecutor* pipeline_ = nullptr;
  Communicator* pp_ = nullptr;
  std::vector<double> pp_scratch_;
  // --deterministic under --pp: each chunk's arena range and tree; per sequence, the LM and MTP
  // losses and each MoE layer's balance and z losses (global MoE layer order).
  struct ChunkTree {
    int64_t begin = 0, end = 0;
    std::unique_ptr<GradientTree> tree;
    std::unique_ptr<ExpertSourceTrees> experts;  // its experts' gradients per source (--ep)
  };
  std::vector<ChunkTree> chunk_trees_;
  std::vector<double> seq_losses_;
  int64_t moe_count_ = 0, decoder_moe_count_ = 0;
  void set_pipeline_deterministic();
  LossBreakdown sum_leaf_losses() const;  // tree over the sequences of leaf_losses_
  // grads = the accumulated sums over ranks, micro-batches and sequences, divided by their
  // count; returns the mean of `total` likewise
  LossBreakdown finish_deterministic(int64_t grad_accum, const LossBreakdown& total);
  LossBreakdown accumulate_deterministic_pipeline(
      int64_t grad_accum, const std::function<const int32_t*(int64_t)>& micro_batch);
  bool interleave_ = true;
  int64_t sequences_ = 0;  // --deterministic: sequences per micro-batch (0: off)
  std::unique_ptr<GradientTree> tree_;
  std::unique_ptr<ExpertSourceTrees> expert_trees_;
  std::vector<float> accum_;
  std::vector<LossBreakdown> leaf_losses_;
  void run_stages(Model* lanes[2], int64_t layers, bool forward);
  LossBreakdown accumulate(int64_t grad_accum,
                           const std::function<const int32_t*(int64_t)>& micro_batch);
  LossBreakdown accumulate_deterministic(int64_t grad_accum,
                                         const std::function<const int32_t*(int64_t)>& micro_batch);
};

}  // namespace moet
