#include "parallel/tp_grad_norm.h"

namespace moet {

TensorParallelGradNorm::TensorParallelGradNorm(Communicator& tp, const ParamStore& params)
    : tp_(tp) {
  size_t entry = 0;  // AdamW::grad_square_sums: one entry per trainable weight, in order
  for (const Weight& w : params.weights()) {
    if (!w.trainable) continue;
    if (w.shard.parts > 1) split_.push_back(entry);
    ++entry;
  }
  parts_.resize(split_.size());
}

const SquareSums& TensorParallelGradNorm::sums(const SquareSums& local) {
  global_.sq.assign(local.sq.begin(), local.sq.end());
  global_.expert.assign(local.expert.begin(), local.expert.end());
  for (size_t k = 0; k < split_.size(); ++k) parts_[k] = local.sq[split_[k]];
  tp_.allreduce_sum(parts_.data(), int64_t(parts_.size()));
  for (size_t k = 0; k < split_.size(); ++k) global_.sq[split_[k]] = parts_[k];
  return global_;
}

}  // namespace moet
