#include "parallel/data_parallel.h"

#include <chrono>
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/ops.h"

namespace moet {

namespace {
// "model.layers.{i}.…" → i; anything else → -1.
int64_t layer_of(const std::string& name) {
  const std::string p = "model.layers.";
  if (name.rfind(p, 0) != 0) return -1;
  return std::stoll(name.substr(p.size()));
}
}  // namespace

DataParallel::DataParallel(ParallelLayout& layout, ParamStore& params, CommStream* stream,
                           bool zero1, MomentDtypes moments)
    : layout_(layout), params_(params), stream_(stream) {
  for (const Weight& w : params.weights()) {
    if (!w.trainable) continue;
    float* p = w.grad.f32();
    const int64_t layer = layer_of(w.name);
    Bucket* last = buckets_.empty() ? nullptr : &buckets_.back();
    if (last && last->expert == w.expert && last->layer == layer && last->ptr + last->n == p)
      last->n += w.grad.numel();
    else
      buckets_.push_back({p, w.grad.numel(), w.expert, layer, false, w.offset});
  }
  if (zero1) {
    std::vector<Zero1::Run> runs;
    for (const Bucket& b : buckets_) runs.push_back({b.offset, b.n, b.expert});
    zero1_ = std::make_unique<Zero1>(layout, params, runs, moments);
  }
}

void DataParallel::count_bucket_bytes(size_t i) {
  const Bucket& b = buckets_[i];
  Communicator& c = b.expert ? *layout_.edp_group : *layout_.world;
  const int64_t P = c.size(), r = c.rank();
  if (P == 1) return;
  // the all-reduce's slices (MpiCommunicator::allreduce_tree), or ZeRO-1's ranges
  const int64_t mine = zero1_ ? zero1_->end(i) - zero1_->begin(i) : b.n * (r + 1) / P - b.n * r / P;
  // reduce-scatter: every slice but its own; with ZeRO-1 the all-gather follows the optimizer
  sync_bytes_ += int64_t(sizeof(float)) * (b.n - mine);
  if (!zero1_) sync_bytes_ += int64_t(sizeof(float)) * (P - 1) * mine;  // all-gather
}

void DataParallel::issue(Bucket& b) {
  b.issued = true;
  count_bucket_bytes(size_t(&b - buckets_.data()));
  auto op = [this, &b] {
    auto t0 = std::chrono::steady_clock::now();
    Communicator& c = b.expert ? *layout_.edp_group : *layout_.world;
    if (zero1_)
      c.reduce_scatter_sum_ranges(b.ptr, zero1_->bounds(size_t(&b - buckets_.data())));
    else
      c.allreduce_sum(b.ptr, b.n);
    sync_s_.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  const char* what = zero1_ ? "gradient reduce-scatter" : "gradient allreduce";
  const int64_t bytes = b.n * int64_t(sizeof(float));
  if (stream_)
    stream_->submit(op, what, trace::kGradSync, bytes);
  else
    trace_.run(what, trace::kGradSync, bytes, op);
}

void DataParallel::set_trace(TraceRecorder* rec) {
  trace_.set_trace(rec);
  if (zero1_) zero1_->set_trace(rec);
}

void DataParallel::on_layer_done(int64_t layer) {
  if (!armed_ || !stream_) return;
  for (Bucket& b : buckets_)
    if (b.layer == layer && !b.issued) issue(b);
}

void DataParallel::reduce_gradients(double scale) {
  const double before = sync_s_;
  for (Bucket& b : buckets_)
    if (!b.issued) issue(b);
  finish_issued(scale, before);
  armed_ = false;
}

void DataParallel::finish_issued(double scale, double sync_before) {
  if (stream_)
    exposed_s_ += stream_->wait_all();
  else
    exposed_s_ += sync_s_ - sync_before;
  for (Bucket& b : buckets_) {
    if (!b.issued) continue;
    const size_t i = size_t(&b - buckets_.data());
    const int64_t lo = zero1_ ? zero1_->begin(i) : 0, hi = zero1_ ? zero1_->end(i) : b.n;
    Tensor t(b.ptr + lo, DType::F32, {hi - lo});
    if (hi > lo && scale != 1.0) ops::scale_inplace(t, scale);
    b.issued = false;
  }
}

void DataParallel::reduce_gradient_range(int64_t begin, int64_t end, double scale) {
  const double before = sync_s_;
  for (Bucket& b : buckets_) {
    const bool inside = b.offset >= begin && b.offset + b.n <= end;
    MOET_ASSERT(inside || b.offset + b.n <= begin || b.offset >= end);
    if (inside && !b.issued) issue(b);
  }
  finish_issued(scale, before);
}

double DataParallel::take_sync_seconds(double* exposed) {
  double s = sync_s_.exchange(0);
  if (exposed) *exposed = exposed_s_;
  exposed_s_ = 0;
  return s;
}

int64_t DataParallel::take_sync_bytes() {
  const int64_t bytes = sync_bytes_;
  sync_bytes_ = 0;
  return bytes;
}

double DataParallel::global_grad_norm(const AdamW& optimizer) {
  if (zero1_) {
    zero1_->grad_square_sums(sums_);
  } else {
    optimizer.grad_square_sums(sums_);
    expert_sums_.clear();
    for (size_t i = 0; i < sums_.sq.size(); ++i)
      if (sums_.expert[i]) expert_sums_.push_back(sums_.sq[i]);
    if (!expert_sums_.empty()) {
      layout_.ep_group->allreduce_sum(expert_sums_.data(), int64_t(expert_sums_.size()));
      size_t e = 0;
      for (size_t i = 0; i < sums_.sq.size(); ++i)
        if (sums_.expert[i]) sums_.sq[i] = expert_sums_[e++];
    }
  }
  return combine_norm_ ? combine_norm_(sums_) : sums_.norm();
}

double DataParallel::optimizer_step(AdamW& optimizer, double lr) {
  const double norm = global_grad_norm(optimizer);
  if (zero1_) {
    for (size_t i = 0; i < buckets_.size(); ++i) {  // the parameters' all-gather
      const int64_t P = zero1_->group(i).size();
      sync_bytes_ += int64_t(sizeof(float)) * (P - 1) * (zero1_->end(i) - zero1_->begin(i));
    }
    return zero1_->step(optimizer, lr, norm);
  }
  return optimizer.step(lr, norm);
}

void DataParallel::reduce_losses(LossBreakdown& l, double scale) {
  double v[5] = {l.loss, l.lm_loss, l.mtp_loss, l.balance_loss, l.z_loss};
  layout_.world->allreduce_sum(v, 5);
  l = LossBreakdown{v[0] * scale, v[1] * scale, v[2] * scale, v[3] * scale, v[4] * scale};
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
