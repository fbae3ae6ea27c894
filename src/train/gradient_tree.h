// GradientTree: adds the gradients of consecutive leaves (one sequence each, under
// --deterministic) in tree_sum's canonical order, holding O(log n) partial sums. Because the
// canonical tree over P × 2^k leaves is the tree over P of the trees over each aligned run of
// 2^k, a rank's tree over its sequences followed by the deterministic allreduce over ranks adds
// exactly as one process does over all the sequences (docs/parallel.md, "--deterministic").
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moet {

class GradientTree {
 public:
  explicit GradientTree(int64_t numel) : numel_(numel) {}
  // Starts a new sum (keeps the buffers).
  void reset() { depth_ = 0; }
  // Adds the next leaf: its numel values.
  void push(const float* leaf);
  // out = the canonical tree sum of the leaves pushed since reset() (at least one).
  void finish(float* out);
  int64_t leaves() const;

 private:
  struct Partial {
    int64_t leaves = 0;
    std::vector<float> sum;
  };
  int64_t numel_;
  std::vector<Partial> stack_;  // stack_[0, depth_) in use, bigger partials first
  size_t depth_ = 0;
};

}  // namespace moet
