#include "model/lm_head.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"
#include "model/operands.h"
#include "model/sequence_parallel.h"
#include "model/vocab_parallel.h"
#include "model/weight_grads.h"

namespace moet {

LmHead::LmHead(double eps, int64_t D, ParamStore& ps, const std::string& norm_name, Weight* proj,
               const ops::LinearPrecision& lin, const TensorParallel& tp)
    : tp_(tp),
      eps_(eps),
      norm_(ps.declare(norm_name, {D}, Init::Ones, false)),
      proj_(proj),
      lin_(lin) {
  ps.reserve_operands(proj_, lin_);
}

int64_t LmHead::chunk_rows(int64_t N, int64_t V) {
  const int64_t budget = (int64_t(64) << 20) / (int64_t(sizeof(float)) * std::max<int64_t>(V, 1));
  return std::clamp<int64_t>(budget / 16 * 16, 64, std::max<int64_t>(N, 1));
}

void LmHead::plan(Workspace& ws) {
  wgrad_ = ws.wgrad;
  const int64_t N = ws.N(), D = norm_->value.size(0), V = proj_->value.size(0);
  // chunks sized by the whole vocabulary: the same rows per chunk (so the same weight-gradient
  // sums) on any number of parts
  chunk_ = std::min(N, chunk_rows(N, V * tp_.parts));
  fn_ND_ = ws.act.alloc_f32({N, D});
  rstd_N_ = ws.act.alloc_f32({tp_.tokens(N)});
  lse_N_ = ws.act.alloc_f32({N});
  dfn_ND_ = ws.act.alloc_f32({N, D});
  fn_q_ = plan_input_operand(ws.act, N, D, lin_);
  // a chunk's logits become their gradient in place, read then only by the projection's backward
  const GemmInput lg = plan_gemm_input(ws.scratch, chunk_, V, lin_, true, true);
  logits_CV_ = lg.values, dlogits_q_ = lg.q;
  if (tp_.sequence_parallel) {
    fn_shard_ND_ = ws.scratch.alloc_f32({tp_.tokens(N), D});
    dfn_shard_ND_ = ws.scratch.alloc_f32({tp_.tokens(N), D});
  }
}

double LmHead::forward(const Tensor& h_ND, const Tensor& targets_N, double grad_scale) {
  if (tp_.sequence_parallel) {
    ops::rmsnorm_forward(h_ND, norm_->value, eps_, fn_shard_ND_, rstd_N_);
    Tensor no_staging;
    sp_gather_input(tp_, fn_shard_ND_, {fn_ND_, fn_q_}, no_staging);
  } else {
    ops::rmsnorm_forward(h_ND, norm_->value, eps_, fn_ND_, rstd_N_, fn_q_);
  }
  const int64_t N = fn_ND_.size(0);
  valid_ = 0;
  const int32_t* t = targets_N.i32();
  for (int64_t n = 0; n < N; ++n) valid_ += t[n] >= 0;
  fused_scale_ = grad_scale;
  const double scale = valid_ ? grad_scale / double(valid_) : 0.0;
  double sum = 0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_) {
    const int64_t r1 = std::min(N, r0 + chunk_);
    Tensor lg = logits_CV_.rows(0, r1 - r0), lse = lse_N_.rows(r0, r1), fn = fn_ND_.rows(r0, r1);
    const ops::Operand fnq = fn_q_.row_range(r0, r1), dlq = dlogits_q_.row_range(0, r1 - r0);
    ops::linear_forward(fn, proj_->value, lg,
                        {.precision = lin_, .wq = proj_->operands(), .xq = &fnq});
    const Tensor tgt = targets_N.rows(r0, r1);
    if (tp_.active()) {
      sum += vocab_parallel_cross_entropy(tp_, lg, tgt, lse, grad_scale != 0, scale, dlq);
    } else if (grad_scale == 0) {
      sum += ops::cross_entropy_forward(lg, tgt, lse);
    } else {
      sum += ops::cross_entropy_fused(lg, tgt, lse, scale, dlq);
    }
    if (grad_scale == 0) continue;
    Tensor dfn = dfn_ND_.rows(r0, r1);
    // the projection's backward now (its weight gradient is not deferred: forward has no W)
    column_parallel_backward(nullptr, tp_, 1, lg, fn, proj_->value, dfn, proj_->grad,
                             {.precision = lin_, .wq = proj_->operands(), .xq = &fnq, .dyq = &dlq});
  }
  return valid_ ? sum / double(valid_) : 0.0;
}

void LmHead::backward(const Tensor& h_ND, const Tensor& targets_N, double grad_scale, Tensor& dh_ND,
                      bool accumulate) {
  const int64_t N = fn_ND_.size(0);
  const double scale = valid_ ? grad_scale / double(valid_) : 0.0;
  MOET_CHECK(fused_scale_ == 0 || fused_scale_ == grad_scale, "LM head: backward with scale ",
             grad_scale, " after a forward told ", fused_scale_);
  for (int64_t r0 = 0; r0 < N && fused_scale_ == 0; r0 += chunk_) {
    const int64_t r1 = std::min(N, r0 + chunk_);
    Tensor lg = logits_CV_.rows(0, r1 - r0), fn = fn_ND_.rows(r0, r1), dfn = dfn_ND_.rows(r0, r1);
    const ops::Operand fnq = fn_q_.row_range(r0, r1), dlq = dlogits_q_.row_range(0, r1 - r0);
    ops::linear_forward(fn, proj_->value, lg,
                        {.precision = lin_, .wq = proj_->operands(), .xq = &fnq});  // again
    Tensor lse = lse_N_.rows(r0, r1);
    if (tp_.active()) {
      vocab_parallel_cross_entropy_backward(tp_, lg, targets_N.rows(r0, r1), lse, scale, dlq);
    } else {
      // the fused form, as forward takes it (the lse it rewrites is the one forward saved)
      ops::cross_entropy_fused(lg, targets_N.rows(r0, r1), lse, scale, dlq);
    }
    column_parallel_backward(wgrad_, tp_, 1, lg, fn, proj_->value, dfn, proj_->grad,
                             {.precision = lin_, .wq = proj_->operands(), .xq = &fnq, .dyq = &dlq});
  }
  if (tp_.sequence_parallel) sp_shard(tp_, dfn_ND_, dfn_shard_ND_, false);
  norm_backward(tp_, tp_.sequence_parallel ? dfn_shard_ND_ : dfn_ND_, h_ND, norm_->value, rstd_N_,
                dh_ND, accumulate, norm_->grad);
  fused_scale_ = 0;
}

void LmHead::whole_logits(const Tensor& fn_RD, const ops::Operand& fnq, Tensor& logits_RV) {
  if (tp_.parts == 1)
    return ops::linear_forward(fn_RD, proj_->value, logits_RV,
                               {.precision = lin_, .wq = proj_->operands(), .xq = &fnq});
  std::vector<float> part(size_t(fn_RD.size(0) * proj_->value.size(0)));
  Tensor part_RV(part.data(), DType::F32, {fn_RD.size(0), proj_->value.size(0)});
  ops::linear_forward(fn_RD, proj_->value, part_RV,
                      {.precision = lin_, .wq = proj_->operands(), .xq = &fnq});
  gather_vocab(tp_, part_RV, logits_RV);
}

void LmHead::logits(Tensor& logits_NV) { whole_logits(fn_ND_, fn_q_, logits_NV); }

void LmHead::logits_of(const Tensor& h_RD, Tensor& logits_RV) {
  const int64_t R = h_RD.size(0);
  MOET_ASSERT(R <= fn_ND_.size(0) && !tp_.sequence_parallel);
  Tensor fn = fn_ND_.rows(0, R), rstd = rstd_N_.rows(0, R);
  const ops::Operand fnq = fn_q_.row_range(0, R);
  ops::rmsnorm_forward(h_RD, norm_->value, eps_, fn, rstd, fnq);
  whole_logits(fn, fnq, logits_RV);
}

}  // namespace moet
