// --pp: the step's micro-batches through this stage's pipeline executor.
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_executor.h"
#include "train/gradient_accumulation.h"

namespace moet {

namespace {

class PipelineAccumulation final : public GradientAccumulation {
 public:
  PipelineAccumulation(Model& model, PipelineExecutor& pipeline, Communicator& pp, DataParallel& dp)
      : model_(model), pipeline_(pipeline), pp_(pp), dp_(dp) {}

  LossBreakdown run(int64_t grad_accum, const MicroBatchFn& micro_batch) override {
    model_.params().zero_grads();
    dp_.arm();  // the executor reports each block's last micro-batch
    LossBreakdown l = pipeline_.run_step(micro_batch, 1.0 / double(grad_accum));
    dp_.reduce_gradients();
    dp_.reduce_losses(l);
    // each stage computed its layers' part of the losses
    double v[5] = {l.loss, l.lm_loss, l.mtp_loss, l.balance_loss, l.z_loss};
    pp_.allreduce_sum(v, 5);
    return LossBreakdown{v[0], v[1], v[2], v[3], v[4]};
  }

 private:
  Model& model_;
  PipelineExecutor& pipeline_;
  Communicator& pp_;
  DataParallel& dp_;
};

}  // namespace

std::unique_ptr<GradientAccumulation> pipeline_accumulation(Model& model,
                                                            PipelineExecutor& pipeline,
                                                            Communicator& pp,
                                                            DataParallel& data_parallel) {
  return std::make_unique<PipelineAccumulation>(model, pipeline, pp, data_parallel);
}

}  // namespace moet
