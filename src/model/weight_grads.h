// WeightGrads: where the weight gradients of a backward go — computed at once, or kept for a
// later W pass (the zero-bubble pipeline schedules split each backward into the input gradient I,
// which the previous stage waits for, and the weight gradient W, which can fill the pipeline's
// idle time; parallel/pipeline_schedule.h).
//
// The layers call linear_backward / grouped_linear_backward below instead of the ops directly.
// While deferring, the op runs its input gradient now, and keeps a copy of everything its weight
// gradient reads (dy, x, their prepared operands, the segment offsets and amaxes); the weight
// operands and the gradient tensor are the parameter's own, unchanged until the optimizer step.
// run() then computes the kept weight gradients with the same op on the same values, so a
// deferred gradient is the same bits as one computed at once, and adds into the parameter's
// gradient in the order the backward kept them.
#pragma once
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace moet {

class WeightGrads {
 public:
  // Kept from now on (until set false) in a batch of their own: one backward's.
  void set_deferring(bool on);
  bool deferring() const { return deferring_; }
  // Computes the oldest batch's kept weight gradients in the order they were kept, frees their
  // copies, and returns the number of weight gradients computed. No batch: 0.
  int64_t run();
  int64_t pending_batches() const { return int64_t(batches_.size()); }
  // Bytes the kept copies hold now.
  int64_t kept_bytes() const { return kept_bytes_; }
  // Buffers allocated so far: the copies' buffers go back to a pool when their W has run and
  // are reused, so a step like the last allocates none (the test's hook).
  int64_t buffers_allocated() const { return buffers_allocated_; }

  void linear_backward(const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND,
                       Tensor& dw_OD, const ops::LinearOptions& o);
  void grouped_linear_backward(const Tensor& dy_MO, const Tensor& x_MD, const Tensor& offsets_E1,
                               const Tensor& w_EOD, Tensor& dx_MD, Tensor& dw_EOD,
                               const ops::GroupedLinearOptions& o);

 private:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
  };
  struct Kept {
    std::vector<Buffer> copies;
    std::function<void()> run;
  };
  struct Batch {
    std::vector<Kept> items;
    int64_t bytes = 0;
  };
  Tensor keep(Kept& k, const Tensor& t);
  ops::Operand keep(Kept& k, const ops::Operand* q);
  Batch& current();
  Buffer take(size_t bytes);  // the smallest pooled buffer that holds bytes, or a new one
  bool deferring_ = false;
  std::multimap<size_t, std::unique_ptr<std::byte[]>> pool_;  // by size
  int64_t buffers_allocated_ = 0;
  std::deque<Batch> batches_;
  int64_t kept_bytes_ = 0;
};

// The op's weight gradient into q when q is deferring, at once otherwise (q null: at once).
void linear_backward(WeightGrads* q, const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD,
                     Tensor& dx_ND, Tensor& dw_OD, const ops::LinearOptions& o = {});
void grouped_linear_backward(WeightGrads* q, const Tensor& dy_MO, const Tensor& x_MD,
                             const Tensor& offsets_E1, const Tensor& w_EOD, Tensor& dx_MD,
                             Tensor& dw_EOD, const ops::GroupedLinearOptions& o = {});

}  // namespace moet
