// One process, or data and expert parallelism: each micro-batch forward and backward in turn.
#include "parallel/data_parallel.h"
#include "train/gradient_accumulation.h"

namespace moet {

void add_losses(LossBreakdown& acc, const LossBreakdown& l, double w) {
  acc.loss += l.loss * w;
  acc.lm_loss += l.lm_loss * w;
  acc.mtp_loss += l.mtp_loss * w;
  acc.balance_loss += l.balance_loss * w;
  acc.z_loss += l.z_loss * w;
}

namespace {

class PlainAccumulation final : public GradientAccumulation {
 public:
  PlainAccumulation(Model& model, DataParallel* dp) : model_(model), dp_(dp) {}

  LossBreakdown run(int64_t grad_accum, const MicroBatchFn& micro_batch) override {
    model_.params().zero_grads();
    LossBreakdown losses;
    const double scale = 1.0 / double(grad_accum);
    for (int64_t a = 0; a < grad_accum; ++a) {
      // the scale announced to forward: the LM heads take their gradient there
      LossBreakdown l = model_.forward(micro_batch(a), scale);
      if (dp_ && a + 1 == grad_accum) dp_->arm();  // gradients final: reduce during backward
      model_.backward(scale);
      add_losses(losses, l, scale);
    }
    if (dp_) {
      dp_->reduce_gradients();
      dp_->reduce_losses(losses);
    }
    return losses;
  }

 private:
  Model& model_;
  DataParallel* dp_;
};

}  // namespace

std::unique_ptr<GradientAccumulation> plain_accumulation(Model& model,
                                                         DataParallel* data_parallel) {
  return std::make_unique<PlainAccumulation>(model, data_parallel);
}

}  // namespace moet
