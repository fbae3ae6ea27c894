// DataParallel: what a training step does across ranks — gradient reduction (expert weights
// over the expert-data-parallel group, everything else over the world, each in the canonical
// order), the global gradient norm, and the global losses and expert loads.
#pragma once
#include <vector>

#include "model/model.h"
#include "optim/adamw.h"
#include "parallel/layout.h"

namespace moet {

class DataParallel {
 public:
  DataParallel(ParallelLayout& layout, ParamStore& params);
  // Sums every gradient over its group and divides by the world size (the loss is a mean over
  // all ranks' tokens).
  void reduce_gradients();
  // sqrt(Σ g²) over all parameters of the model (expert shards of the whole ep group counted
  // once); the same on every rank.
  double global_grad_norm(const AdamW& optimizer);
  // Mean over ranks of each loss; sum over ranks of the expert loads.
  void reduce_losses(LossBreakdown& l);
  void reduce_expert_loads(const std::vector<MoeLayer*>& layers);
  ParallelLayout& layout() { return layout_; }

 private:
  struct Bucket {
    float* ptr;
    int64_t n;
    bool expert;
  };
  ParallelLayout& layout_;
  ParamStore& params_;
  std::vector<Bucket> buckets_;  // runs of consecutive trainable weights of the same group
  std::vector<double> scratch_, expert_sums_;
};

}  // namespace moet
