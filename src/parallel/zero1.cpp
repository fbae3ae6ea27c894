#include "parallel/zero1.h"

#include <algorithm>

#include "core/error.h"
#include "core/tree_sum.h"
#include "kernels/ops.h"

namespace moet {

namespace {
// n elements of a flat moment arena of dtype t, from element `at`.
Tensor moment_view(const Arena& a, DType t, int64_t at, int64_t n) {
  return Tensor(a.base() + at * int64_t(dtype_size(t)), t, {n});
}
}  // namespace

Zero1::Zero1(ParallelLayout& layout, ParamStore& params, const std::vector<Run>& runs,
             MomentDtypes dtypes)
    : layout_(layout),
      params_(params),
      dtypes_(dtypes),
      m_(Arena::planning()),
      v_(Arena::planning()) {
  for (const Run& r : runs) {
    Communicator* g = r.expert ? layout.edp_group.get() : layout.world;
    runs_.push_back({r.offset, r.n, r.expert, g, {}, 0});
  }
  // Chunks of every trainable weight in declaration order (the order of the norm), and where
  // chunks start inside each run: the only places a run may be split.
  std::vector<std::vector<int64_t>> starts(runs_.size());
  int64_t dense_slots = 0, expert_slots = 0;
  size_t run = 0;
  for (const Weight& w : params.weights()) {
    if (!w.trainable) continue;
    while (run < runs_.size() && w.offset >= runs_[run].offset + runs_[run].n) ++run;
    MOET_CHECK(run < runs_.size() && w.offset >= runs_[run].offset &&
                   w.offset + w.grad.numel() <= runs_[run].offset + runs_[run].n,
               "zero1: weight ", w.name, " is not inside one gradient bucket");
    const int64_t n = w.grad.numel();
    const int64_t units = w.expert ? w.grad.size(0) : 1;
    const int64_t per = units > 0 ? n / units : 0;
    const int64_t per_unit = (per + kSumSquaresChunk - 1) / kSumSquaresChunk;
    weights_.push_back({run, w.offset, n, w.expert, w.decay, units, per_unit, chunks_.size()});
    for (int64_t u = 0; u < units; ++u)
      for (int64_t c = 0; c < per_unit; ++c) {
        const int64_t at = w.offset + u * per + c * kSumSquaresChunk;
        const int64_t slot = w.expert ? expert_slots++ : dense_slots++;
        chunks_.push_back(
            {at, std::min(kSumSquaresChunk, per - c * kSumSquaresChunk), slot, false});
        starts[run].push_back(at - runs_[run].offset);
      }
  }
  // Split each run about evenly over its group, at chunk starts.
  int64_t moments = 0;
  for (size_t i = 0; i < runs_.size(); ++i) {
    RunState& r = runs_[i];
    const int64_t P = r.group->size();
    r.bounds.assign(size_t(P) + 1, r.n);
    r.bounds[0] = 0;
    for (int64_t p = 1; p < P; ++p) {
      auto it = std::lower_bound(starts[i].begin(), starts[i].end(), r.n * p / P);
      r.bounds[p] = it == starts[i].end() ? r.n : *it;
    }
    r.moment_base = moments;
    moments += end(i) - begin(i);
  }
  for (const WeightInfo& w : weights_)
    for (int64_t k = 0; k < w.units * w.per_unit; ++k) {
      Chunk& c = chunks_[w.first + size_t(k)];
      const int64_t rel = c.at - runs_[w.run].offset;
      c.mine = rel >= begin(w.run) && rel < end(w.run);
    }
  dense_sq_.resize(size_t(dense_slots));
  expert_sq_.resize(size_t(expert_slots));
  moments_ = moments;
  m_ = Arena(size_t(moments) * dtype_size(dtypes_.m));
  v_ = Arena(size_t(moments) * dtype_size(dtypes_.v));
}

std::vector<Zero1::MomentRange> Zero1::moment_ranges() {
  std::vector<MomentRange> out;
  for (size_t i = 0; i < runs_.size(); ++i) {
    const int64_t n = end(i) - begin(i);
    if (n <= 0) continue;
    const int64_t base = runs_[i].moment_base;
    out.push_back({runs_[i].offset + begin(i), n, moment_view(m_, dtypes_.m, base, n),
                   moment_view(v_, dtypes_.v, base, n)});
  }
  return out;
}

void Zero1::grad_square_sums(SquareSums& out) {
  // Each chunk's sum of squares is computed by the one rank holding its reduced gradient; the
  // others contribute +0, so the sums over the groups are exact copies.
  std::fill(dense_sq_.begin(), dense_sq_.end(), 0.0);
  std::fill(expert_sq_.begin(), expert_sq_.end(), 0.0);
  float* g = params_.all_grads().f32();
  // Weights whose Σ g² is summed by tensor-parallel piece (--deterministic, Weight::
  // grad_square_sum) need their whole reduced gradient: every rank's ranges are all-gathered
  // first, as the parameters are after the step (the ranges not this rank's are not read again).
  bool by_piece = false;
  for (const Weight& w : params_.weights()) by_piece |= w.trainable && w.shard.pieces > 0;
  if (by_piece)
    for (size_t i = 0; i < runs_.size(); ++i)
      runs_[i].group->allgather_ranges(g + runs_[i].offset, bounds(i));
  for (const WeightInfo& w : weights_)
    for (int64_t k = 0; k < w.units * w.per_unit; ++k) {
      const Chunk& c = chunks_[w.first + size_t(k)];
      if (!c.mine) continue;
      (w.expert ? expert_sq_ : dense_sq_)[size_t(c.slot)] =
          ops::sum_squares(Tensor(g + c.at, DType::F32, {c.len}));
    }
  if (!dense_sq_.empty()) layout_.world->allreduce_sum(dense_sq_.data(), int64_t(dense_sq_.size()));
  if (!expert_sq_.empty())
    layout_.edp_group->allreduce_sum(expert_sq_.data(), int64_t(expert_sq_.size()));
  // Put the sums together as AdamW::grad_square_sums does: ops::sum_squares adds its chunk
  // sums in order from 0; dense weights one after another; an expert weight's experts in
  // tree_sum order.
  out.sq.clear();
  out.expert.clear();
  expert_sums_.clear();
  for (const WeightInfo& w : weights_) {
    const std::vector<double>& sq = w.expert ? expert_sq_ : dense_sq_;
    auto unit = [&](int64_t u) {
      double t = 0;
      for (int64_t c = 0; c < w.per_unit; ++c)
        t += sq[size_t(chunks_[w.first + size_t(u * w.per_unit + c)].slot)];
      return t;
    };
    out.expert.push_back(w.expert);
    out.sq.push_back(w.expert ? tree_sum<double>(0, int(w.units), [&](int u) { return unit(u); })
                              : unit(0));
    if (w.expert) expert_sums_.push_back(out.sq.back());
  }
  if (by_piece) {  // AdamW::grad_square_sums' entries are its trainable weights in order
    size_t i = 0;
    for (const Weight& w : params_.weights()) {
      if (!w.trainable) continue;
      if (w.shard.pieces > 0) out.sq[i] = w.grad_square_sum();
      ++i;
    }
  }
  if (expert_sums_.empty()) return;
  layout_.ep_group->allreduce_sum(expert_sums_.data(), int64_t(expert_sums_.size()));
  size_t e = 0;
  for (size_t i = 0; i < out.sq.size(); ++i)
    if (out.expert[i]) out.sq[i] = expert_sums_[e++];
}

double Zero1::step(AdamW& opt, double lr, double norm) {
  const double clip = opt.clip_factor(norm);
  const int64_t t = opt.steps_taken() + 1;
  opt.set_steps_taken(t);
  const AdamWConfig& cfg = opt.config();
  float* values = params_.all_values().f32();
  float* grads = params_.all_grads().f32();
  for (const WeightInfo& w : weights_) {
    const RunState& r = runs_[w.run];
    const int64_t own = r.offset + begin(w.run);
    const int64_t lo = std::max(w.offset, own);
    const int64_t hi = std::min(w.offset + w.n, r.offset + end(w.run));
    if (lo >= hi) continue;
    Tensor p(values + lo, DType::F32, {hi - lo}), g(grads + lo, DType::F32, {hi - lo});
    Tensor m = moment_view(m_, dtypes_.m, r.moment_base + (lo - own), hi - lo);
    Tensor v = moment_view(v_, dtypes_.v, r.moment_base + (lo - own), hi - lo);
    ops::AdamWSpec spec{lr, cfg.beta1, cfg.beta2, cfg.eps, w.decay ? cfg.weight_decay : 0.0,
                        t,  clip};
    ops::adamw_update(p, g, m, v, spec);
  }
  int64_t mine = 0;  // what this rank contributes: its ranges
  for (size_t i = 0; i < runs_.size(); ++i) mine += end(i) - begin(i);
  trace_.run("parameter all-gather", trace::kGradSync, mine * int64_t(sizeof(float)), [&] {
    for (size_t i = 0; i < runs_.size(); ++i)
      runs_[i].group->allgather_ranges(values + runs_[i].offset, bounds(i));
  });
  return norm;
}

}  // namespace moet
