#include "model/weight_grads.h"

#include <cstring>

namespace moet {

void WeightGrads::set_deferring(bool on) {
  if (on && !deferring_) batches_.emplace_back();
  deferring_ = on;
}

WeightGrads::Batch& WeightGrads::current() {
  MOET_ASSERT(deferring_ && !batches_.empty());
  return batches_.back();
}

int64_t WeightGrads::run() {
  if (batches_.empty()) return 0;
  MOET_ASSERT(!(deferring_ && batches_.size() == 1));  // not the batch still being kept
  Batch b = std::move(batches_.front());
  batches_.pop_front();
  for (Kept& k : b.items) {
    k.run();
    for (Buffer& c : k.copies) pool_.emplace(c.bytes, std::move(c.data));
  }
  kept_bytes_ -= b.bytes;
  return int64_t(b.items.size());
}

WeightGrads::Buffer WeightGrads::take(size_t bytes) {
  const auto it = pool_.lower_bound(bytes);
  if (it == pool_.end()) {
    ++buffers_allocated_;
    return Buffer{std::make_unique<std::byte[]>(bytes), bytes};
  }
  Buffer b{std::move(it->second), it->first};
  pool_.erase(it);
  return b;
}

Tensor WeightGrads::keep(Kept& k, const Tensor& t) {
  if (t.empty()) return t;
  Tensor c = t;
  k.copies.push_back(take(t.bytes()));
  c.ptr = k.copies.back().data.get();
  std::memcpy(c.ptr, t.ptr, t.bytes());
  current().bytes += int64_t(t.bytes());
  kept_bytes_ += int64_t(t.bytes());
  return c;
}

ops::Operand WeightGrads::keep(Kept& k, const ops::Operand* q) {
  ops::Operand c;
  if (!q) return c;
  c.fmt = q->fmt;
  c.rows = keep(k, q->rows);
  c.cols = keep(k, q->cols);
  c.segments = keep(k, q->segments);
  return c;
}

void WeightGrads::linear_backward(const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD,
                                  Tensor& dx_ND, Tensor& dw_OD, const ops::LinearOptions& o) {
  Tensor none;
  if (dw_OD.empty()) return ops::linear_backward(dy_NO, x_ND, w_OD, dx_ND, none, o);
  // copies first: dx may be written over what the weight gradient reads
  Kept k;
  const Tensor dy = keep(k, dy_NO), x = keep(k, x_ND);
  const ops::Operand xq = keep(k, o.xq), dyq = keep(k, o.dyq);
  ops::linear_backward(dy_NO, x_ND, w_OD, dx_ND, none, o);  // the input gradient now
  const bool has_xq = o.xq != nullptr, has_dyq = o.dyq != nullptr;
  k.run = [=, dw = dw_OD]() mutable {
    ops::LinearOptions wo = o;
    wo.xq = has_xq ? &xq : nullptr;
    wo.dyq = has_dyq ? &dyq : nullptr;
    wo.accumulate = false;
    Tensor no_dx;
    ops::linear_backward(dy, x, w_OD, no_dx, dw, wo);
  };
  current().items.push_back(std::move(k));
}

void WeightGrads::grouped_linear_backward(const Tensor& dy_MO, const Tensor& x_MD,
                                          const Tensor& offsets_E1, const Tensor& w_EOD,
                                          Tensor& dx_MD, Tensor& dw_EOD,
                                          const ops::GroupedLinearOptions& o) {
  Tensor none;
  if (dw_EOD.empty())
    return ops::grouped_linear_backward(dy_MO, x_MD, offsets_E1, w_EOD, dx_MD, none, o);
  Kept k;
  const Tensor dy = keep(k, dy_MO), x = keep(k, x_MD), off = keep(k, offsets_E1);
  const ops::Operand xq = keep(k, o.xq), dyq = keep(k, o.dyq);
  ops::grouped_linear_backward(dy_MO, x_MD, offsets_E1, w_EOD, dx_MD, none, o);
  const bool has_xq = o.xq != nullptr, has_dyq = o.dyq != nullptr;
  std::vector<float> amax;
  if (o.x_fp4_amax) amax.assign(o.x_fp4_amax, o.x_fp4_amax + (offsets_E1.numel() - 1));
  k.run = [=, dw = dw_EOD, amax = std::move(amax)]() mutable {
    ops::GroupedLinearOptions wo = o;
    wo.xq = has_xq ? &xq : nullptr;
    wo.dyq = has_dyq ? &dyq : nullptr;
    wo.x_fp4_amax = amax.empty() ? nullptr : amax.data();
    Tensor no_dx;
    ops::grouped_linear_backward(dy, x, off, w_EOD, no_dx, dw, wo);
  };
  current().items.push_back(std::move(k));
}

void linear_backward(WeightGrads* q, const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD,
                     Tensor& dx_ND, Tensor& dw_OD, const ops::LinearOptions& o) {
  if (q && q->deferring())
    q->linear_backward(dy_NO, x_ND, w_OD, dx_ND, dw_OD, o);
  else
    ops::linear_backward(dy_NO, x_ND, w_OD, dx_ND, dw_OD, o);
}

void grouped_linear_backward(WeightGrads* q, const Tensor& dy_MO, const Tensor& x_MD,
                             const Tensor& offsets_E1, const Tensor& w_EOD, Tensor& dx_MD,
                             Tensor& dw_EOD, const ops::GroupedLinearOptions& o) {
  if (q && q->deferring())
    q->grouped_linear_backward(dy_MO, x_MD, offsets_E1, w_EOD, dx_MD, dw_EOD, o);
  else
    ops::grouped_linear_backward(dy_MO, x_MD, offsets_E1, w_EOD, dx_MD, dw_EOD, o);
}

}  // namespace moet
