// parallelize(): a training run's parallel layout set up in one place (as torchtitan's
// parallelize does), so that the training loop stays short. From the options and the world it
// makes:
//   - the process groups, in Megatron's rank order (pipeline outermost): the pipeline group
//     (one rank per stage), the stage's data-parallel group, and within it the expert-parallel
//     and expert-data-parallel groups (ParallelLayout);
//   - the models: one (one process, data and expert parallelism), two lanes over one set of
//     parameters (--a2a-overlap), or a pipeline stage's model chunks with a slot per
//     micro-batch in flight (--pp, --vpp, --pp-layout);
//   - the expert dispatchers, the communication stream, data parallelism and the pipeline
//     executor, wired together.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "parallel/comm_stream.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_exchange_dispatcher.h"
#include "parallel/layout.h"
#include "parallel/pipeline_executor.h"
#include "parallel/tp_group.h"
#include "train/train_options.h"
#include "train/train_step.h"

namespace moet {

class TraceRecorder;

// The ModelPart of each virtual stage of a --pp-layout (or of the even split of the layers
// when the layout is empty), checked: the embedding on the first stage, the loss and every MTP
// layer on the last, every stage holding something. One moet::Error line otherwise.
std::vector<ModelPart> pipeline_parts(const ModelConfig& cfg, const std::string& layout,
                                      int64_t virtual_stages);

struct ParallelRun {
  int world_size = 1, world_rank = 0;
  int pp = 1, pp_rank = 0;  // pipeline stages and this rank's
  int dp = 1, dp_rank = 0;  // data-parallel ranks per stage and this rank's
  int tp = 1, tp_rank = 0;  // tensor-parallel parts and this rank's
  std::unique_ptr<Communicator> pp_group, dp_group, tp_group;
  std::unique_ptr<CommunicatorTpGroup> tp_collectives;  // the layers' collectives over tp_group
  std::optional<ParallelLayout> layout;                 // over the stage's data-parallel group
  std::unique_ptr<CommStream> stream;
  std::vector<ExpertExchangeDispatcher*> exchanges;
  ParamStore stage_params;  // --pp: this stage's parameters (the models declare into it)
  // models[0] is the primary: without --pp the model (and models[1] the second lane with
  // --a2a-overlap); with --pp every chunk's every slot, chunk by chunk.
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::vector<Model*>> chunks;  // [chunk][slot]; one process: {{models[0]}}
  std::unique_ptr<PipelineExecutor> pipeline;
  std::optional<DataParallel> dp_sync;

  Model& model() { return *models[0]; }
  ParamStore& params() { return models[0]->params(); }
  Model* second_lane() const { return !pipeline && models.size() > 1 ? models[1].get() : nullptr; }
  // The MoE layers that keep this rank's router statistics and update the expert biases (one
  // per layer), and the pipeline slots' other instances whose statistics are added into them
  // and the second lane's (--a2a-overlap).
  std::vector<MoeLayer*> moe_layers() const;
  std::vector<std::pair<MoeLayer*, MoeLayer*>> moe_merges() const;  // (from, into)
  // How a step runs on this layout: the one GradientAccumulation its mode needs (plain, two
  // lanes, deterministic, pipeline, deterministic pipeline) and what the update synchronises.
  StepPlan step_plan(const TrainOptions& o, TraceRecorder* trace);
  int64_t activation_bytes() const;
};

// --overlap: whether the collectives run on a communication thread, and why ("auto": when the
// node's cores hold every rank's compute threads and one more each).
struct OverlapChoice {
  bool on = false;
  std::string why;
};
OverlapChoice choose_overlap(OverlapMode mode, int threads_per_rank);

// threads: compute threads per rank (the communication stream runs when a core is left).
std::unique_ptr<ParallelRun> parallelize(const TrainOptions& o, const ModelConfig& cfg,
                                         Communicator* world, const PrecisionPolicy& precision,
                                         int threads, TraceRecorder* trace);

}  // namespace moet
