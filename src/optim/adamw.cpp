#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/tree_sum.h"

namespace moet {

namespace {
Tensor flat_at(const Tensor& all, int64_t offset, int64_t n) {
  return Tensor(all.f32() + offset, DType::F32, {n});
}
}  // namespace

namespace {
Arena moment_arena(const ParamStore& ps, DType t, bool allocate) {
  MOET_CHECK(t == DType::F32 || t == DType::BF16, "AdamW: moments are fp32 or bf16, not ",
             dtype_name(t));
  return allocate ? Arena(size_t(ps.numel()) * dtype_size(t)) : Arena::planning();
}
Tensor moment_at(const Tensor& all, int64_t offset, int64_t n) {
  return Tensor(static_cast<char*>(all.ptr) + offset * int64_t(dtype_size(all.dtype)), all.dtype,
                {n});
}
}  // namespace

AdamW::AdamW(ParamStore& ps, AdamWConfig cfg, bool allocate_moments)
    : ps_(ps),
      cfg_(cfg),
      m_(moment_arena(ps, cfg.moments.m, allocate_moments)),
      v_(moment_arena(ps, cfg.moments.v, allocate_moments)),
      m_all_(m_.base(), cfg.moments.m, {ps.numel()}),
      v_all_(v_.base(), cfg.moments.v, {ps.numel()}) {}

void AdamW::grad_square_sums(SquareSums& out) const {
  out.sq.clear();
  out.expert.clear();
  for (const Weight& w : ps_.weights()) {
    if (!w.trainable) continue;
    out.expert.push_back(w.expert);
    if (!w.expert) {
      out.sq.push_back(w.grad_square_sum());
      continue;
    }
    const int64_t experts = w.grad.size(0), per = w.grad.numel() / experts;
    out.sq.push_back(tree_sum<double>(0, int(experts), [&](int e) {
      return ops::sum_squares(Tensor(w.grad.f32() + e * per, DType::F32, {per}));
    }));
  }
}

double SquareSums::norm() const {
  double total = 0;
  for (size_t i = 0; i < sq.size(); ++i)
    if (!expert[i]) total += sq[i];
  for (size_t i = 0; i < sq.size(); ++i)
    if (expert[i]) total += sq[i];
  return std::sqrt(total);
}

double AdamW::grad_norm() const {
  grad_square_sums(sums_);  // member: no allocation after the first step
  return sums_.norm();
}

double AdamW::clip_factor(double norm) const {
  if (cfg_.grad_clip <= 0) return 1.0;
  return std::min(1.0, cfg_.grad_clip / (norm + 1e-6));
}

double AdamW::step(double lr, double norm) {
  MOET_CHECK(has_moments(), "AdamW::step: this optimizer has no moments (ZeRO-1 steps instead)");
  const double clip = clip_factor(norm);
  ++t_;
  for (Weight& w : ps_.weights()) {
    if (!w.trainable) continue;
    const int64_t n = w.value.numel();
    Tensor p = flat_at(ps_.all_values(), w.offset, n), g = flat_at(ps_.all_grads(), w.offset, n);
    Tensor m = moment_at(m_all_, w.offset, n), v = moment_at(v_all_, w.offset, n);
    ops::AdamWSpec spec{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, w.decay ? cfg_.weight_decay : 0.0,
                        t_, clip};
    ops::adamw_update(p, g, m, v, spec);
  }
  return norm;
}

}  // namespace moet
