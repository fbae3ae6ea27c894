// How a step's micro-batches become gradients: one implementation per parallel mode, chosen
// once where the layout is built (ParallelRun::step_plan, train/parallelize.cpp). Each runs the
// step's grad_accum micro-batches forward and backward and leaves in the parameters' gradients
// the step's gradient (reduced over the data-parallel ranks), and returns the step's mean
// losses (reduced over the data-parallel ranks and summed over the pipeline stages). What
// follows — clipping, AdamW, the expert-bias update — is StepRunner's, the same for every mode.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "model/model.h"

namespace moet {

class Communicator;
class DataParallel;
class PipelineExecutor;

// micro_batch(a) returns micro-batch a's B×(T+1) tokens, a < grad_accum.
using MicroBatchFn = std::function<const int32_t*(int64_t)>;

class GradientAccumulation {
 public:
  virtual ~GradientAccumulation() = default;
  virtual LossBreakdown run(int64_t grad_accum, const MicroBatchFn& micro_batch) = 0;
};

// One process, or data and expert parallelism (data_parallel: null for one process): each
// micro-batch forward and backward in turn, the last one's gradients reduced during its
// backward (the reduction armed there).
std::unique_ptr<GradientAccumulation> plain_accumulation(Model& model, DataParallel* data_parallel);

// --a2a-overlap: `lane` (built over `model`'s parameters: ModelSpec::shared) takes
// the second half of every micro-batch. With interleave the two lanes' stages alternate so each
// lane's all-to-alls travel under the other lane's compute; without, each layer runs lane by
// lane (the same arithmetic, bit for bit). The lane's router statistics are instances of the
// model's layers (second_lane_merges).
std::unique_ptr<GradientAccumulation> two_lane_accumulation(Model& model, Model& lane,
                                                            bool interleave,
                                                            DataParallel* data_parallel);
std::vector<std::pair<MoeLayer*, MoeLayer*>> second_lane_merges(Model& model, Model& lane);

// --deterministic: each micro-batch holds `sequences` sequences and the model is planned for
// one; every sequence's gradient is computed into fresh buffers and the sequences are added in
// the canonical tree order (GradientTree), reduced over the ranks after every micro-batch
// (plain sums), accumulated over micro-batches in order and scaled once at the end. Data
// parallelism over P ranks with a power-of-two micro-batch then gives bitwise what one process
// gives with a P-times larger micro-batch (docs/parallel.md). Under expert parallelism the
// routed experts' gradients are added per source rank (ExpertSourceTrees), so that holds too.
std::unique_ptr<GradientAccumulation> deterministic_accumulation(Model& model, int64_t sequences,
                                                                 DataParallel* data_parallel);

// --pp: the micro-batches run through the pipeline executor (this stage's parameters are
// model's); the losses are summed over the pipeline group `pp` (each stage computes its part).
std::unique_ptr<GradientAccumulation> pipeline_accumulation(Model& model,
                                                            PipelineExecutor& pipeline,
                                                            Communicator& pp,
                                                            DataParallel& data_parallel);

// --pp with --deterministic: every sequence is a pipeline micro-batch; each chunk adds its
// sequences' gradients in its own GradientTree, and reduces and accumulates them when it has
// seen a micro-batch's `sequences` sequences; the losses are put together per sequence, layer by
// layer, as one process adds them (docs/pipeline.md).
std::unique_ptr<GradientAccumulation> deterministic_pipeline_accumulation(
    Model& model, int64_t sequences, PipelineExecutor& pipeline, Communicator& pp,
    DataParallel& data_parallel);

// Adds l·w into acc, field by field.
void add_losses(LossBreakdown& acc, const LossBreakdown& l, double w);

}  // namespace moet
