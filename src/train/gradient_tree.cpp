#include "train/gradient_tree.h"

#include <cstring>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace moet {

namespace {
// left += right, element by element.
void add_into(std::vector<float>& left, std::vector<float>& right) {
  Tensor l(left.data(), DType::F32, {int64_t(left.size())});
  Tensor r(right.data(), DType::F32, {int64_t(right.size())});
  ops::add(l, r, l);
}
}  // namespace

void GradientTree::push(const float* leaf) {
  if (stack_.size() == depth_) stack_.emplace_back();
  Partial& top = stack_[depth_++];
  top.leaves = 1;
  top.sum.resize(size_t(numel_));
  std::memcpy(top.sum.data(), leaf, size_t(numel_) * sizeof(float));
  // Two partials of the same size are the two halves of a canonical subtree: merge them.
  while (depth_ >= 2 && stack_[depth_ - 1].leaves == stack_[depth_ - 2].leaves) {
    Partial& left = stack_[depth_ - 2];
    Partial& right = stack_[depth_ - 1];
    add_into(left.sum, right.sum);
    left.leaves *= 2;
    --depth_;
  }
}

void GradientTree::finish(float* out) {
  MOET_CHECK(depth_ > 0, "GradientTree::finish with no leaves");
  // What is left are power-of-two runs, biggest first; the canonical tree splits off the
  // biggest run and sums the rest first, so fold from the right.
  for (size_t i = depth_ - 1; i > 0; --i) add_into(stack_[i - 1].sum, stack_[i].sum);
  std::memcpy(out, stack_[0].sum.data(), size_t(numel_) * sizeof(float));
  depth_ = 0;
}

int64_t GradientTree::leaves() const {
  int64_t n = 0;
  for (size_t i = 0; i < depth_; ++i) n += stack_[i].leaves;
  return n;
}

}  // namespace moet
