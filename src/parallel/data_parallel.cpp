#include "parallel/data_parallel.h"

#include <cmath>

#include "kernels/ops.h"

namespace moet {

DataParallel::DataParallel(ParallelLayout& layout, ParamStore& params)
    : layout_(layout), params_(params) {
  for (const Weight& w : params.weights()) {
    if (!w.trainable) continue;
    float* p = w.grad.f32();
    if (!buckets_.empty() && buckets_.back().expert == w.expert &&
        buckets_.back().ptr + buckets_.back().n == p)
      buckets_.back().n += w.grad.numel();
    else
      buckets_.push_back({p, w.grad.numel(), w.expert});
  }
}

void DataParallel::reduce_gradients() {
  const double inv = 1.0 / double(layout_.size());
  for (const Bucket& b : buckets_) {
    Communicator& c = b.expert ? *layout_.edp_group : *layout_.world;
    c.allreduce_sum(b.ptr, b.n);
    Tensor t(b.ptr, DType::F32, {b.n});
    ops::scale_inplace(t, inv);
  }
}

double DataParallel::global_grad_norm(const AdamW& optimizer) {
  double dense;
  optimizer.grad_square_sums(dense, expert_sums_);
  if (!expert_sums_.empty())
    layout_.ep_group->allreduce_sum(expert_sums_.data(), int64_t(expert_sums_.size()));
  return AdamW::norm_from(dense, expert_sums_);
}

void DataParallel::reduce_losses(LossBreakdown& l) {
  double v[5] = {l.loss, l.lm_loss, l.mtp_loss, l.balance_loss, l.z_loss};
  layout_.world->allreduce_sum(v, 5);
  const double inv = 1.0 / double(layout_.size());
  l = LossBreakdown{v[0] * inv, v[1] * inv, v[2] * inv, v[3] * inv, v[4] * inv};
}

void DataParallel::reduce_expert_loads(const std::vector<MoeLayer*>& layers) {
  for (MoeLayer* layer : layers) {
    std::vector<int64_t>& load = layer->stats().load_E;
    scratch_.assign(load.begin(), load.end());
    layout_.world->allreduce_sum(scratch_.data(), int64_t(scratch_.size()));
    for (size_t e = 0; e < load.size(); ++e) load[e] = int64_t(scratch_[e]);
  }
}

}  // namespace moet
