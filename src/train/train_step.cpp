#include "train/train_step.h"

#include "optim/expert_bias.h"
#include "parallel/data_parallel.h"

namespace moet {

StepRunner::StepRunner(Model& model, AdamWConfig adamw, LrSchedule schedule,
                       double bias_update_rate, DataParallel* data_parallel)
    : model_(model),
      adamw_(model.params(), adamw, !(data_parallel && data_parallel->zero1())),
      schedule_(schedule),
      bias_rate_(bias_update_rate),
      dp_(data_parallel) {}

StepResult StepRunner::run(int64_t step, int64_t grad_accum,
                           const std::function<const int32_t*(int64_t)>& micro_batch) {
  const auto& moe = model_.moe_layers();
  model_.params().zero_grads();
  reset_router_stats(moe);
  StepResult r;
  for (int64_t a = 0; a < grad_accum; ++a) {
    LossBreakdown l = model_.forward(micro_batch(a));
    if (dp_ && a + 1 == grad_accum) dp_->arm();  // gradients final: reduce during backward
    model_.backward(1.0 / double(grad_accum));
    r.losses.loss += l.loss / double(grad_accum);
    r.losses.lm_loss += l.lm_loss / double(grad_accum);
    r.losses.mtp_loss += l.mtp_loss / double(grad_accum);
    r.losses.balance_loss += l.balance_loss / double(grad_accum);
    r.losses.z_loss += l.z_loss / double(grad_accum);
  }
  r.lr = schedule_.at(step);
  if (dp_) {
    dp_->reduce_gradients();
    dp_->reduce_losses(r.losses);
    dp_->reduce_expert_loads(moe);
    r.grad_norm = dp_->optimizer_step(adamw_, r.lr);
  } else {
    r.grad_norm = adamw_.step(r.lr);
  }
  r.max_expert_load = max_expert_load_ratio(moe);
  update_expert_bias(moe, bias_rate_);
  return r;
}

}  // namespace moet
