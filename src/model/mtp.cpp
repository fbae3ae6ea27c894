#include "model/mtp.h"

#include <algorithm>

#include "kernels/ops.h"
#include "model/operands.h"
#include "model/sequence_parallel.h"
#include "model/vocab_parallel.h"
#include "model/weight_grads.h"

namespace moet {

MtpModule::MtpModule(const ModelConfig& c, ParamStore& ps, const std::string& p, int64_t depth,
                     Weight* embed, Weight* head, std::unique_ptr<TokenDispatcher> dispatcher,
                     const PrecisionPolicy& precision, const TensorParallel& tp)
    : tp_(tp),
      k_(depth),
      eps_(c.rms_norm_eps),
      embed_(embed),
      enorm_(ps.declare(p + "enorm.weight", {c.hidden_size}, Init::Ones, false)),
      hnorm_(ps.declare(p + "hnorm.weight", {c.hidden_size}, Init::Ones, false)),
      eh_proj_(
          ps.declare(p + "eh_proj.weight", {c.hidden_size, 2 * c.hidden_size}, Init::Normal, true)),
      eh_lin_(precision.head()),
      block_(c, ps, p, c.mtp_is_moe(), std::move(dispatcher), precision,
             c.num_hidden_layers + depth - 1, tp),
      head_(c.rms_norm_eps, c.hidden_size, ps, p + "shared_head.norm.weight", head,
            precision.head(), tp) {
  ps.reserve_operands(eh_proj_, eh_lin_);
}

void MtpModule::plan(Workspace& ws, Workspace& block_ws) {
  wgrad_ = ws.wgrad;
  // the tokens and targets: every token; the rest this part's tokens under sequence parallelism
  // (the embedding's output reduce-scattered; eh_proj runs on them as the down-projections do)
  const int64_t N = ws.N(), D = enorm_->value.size(0), S = tp_.tokens(N);
  Arena& a = ws.act;
  in_tok_N_ = a.alloc_i32({N});
  tgt_N_ = a.alloc_i32({N});
  e_ND_ = a.alloc_f32({S, D});
  en_ND_ = a.alloc_f32({S, D});
  e_rstd_N_ = a.alloc_f32({S});
  hn_ND_ = a.alloc_f32({S, D});
  h_rstd_N_ = a.alloc_f32({S});
  const GemmInput cat = plan_gemm_input(a, S, 2 * D, eh_lin_);  // read only by eh_proj
  cat_N2D_ = cat.values, cat_q_ = cat.q;
  x_ND_ = a.alloc_f32({S, D});
  out_ND_ = a.alloc_f32({S, D});
  Arena& s = ws.scratch;
  // in use while the block runs backward: its output gradient and its input gradient
  dout_ND_ = s.alloc_f32({S, D});
  dx_ND_ = s.alloc_f32({S, D});
  // The head's temporaries, the block's and the gradients after the block's backward are never
  // in use at once: the same bytes.
  const size_t own = s.used();
  head_.plan(ws);
  const size_t head_end = s.used();
  s.seek(own);
  block_.plan(block_ws);
  const size_t block_end = s.used();
  s.seek(own);
  dcat_N2D_ = s.alloc_f32({S, 2 * D});
  den_ND_ = s.alloc_f32({S, D});
  dhn_ND_ = s.alloc_f32({S, D});
  de_ND_ = s.alloc_f32({S, D});
  s.seek(std::max({head_end, block_end, s.used()}));
}

void MtpModule::shifted_tokens(const int32_t* seq, int64_t B, int64_t T, int64_t k, int32_t* in,
                               int32_t* tgt) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* s = seq + b * (T + 1);
      if (in) in[b * T + t] = t + k <= T ? s[t + k] : 0;
      if (tgt) tgt[b * T + t] = t + k + 1 <= T ? s[t + k + 1] : -1;
    }
}

double MtpModule::forward(const Tensor& h_prev_ND, const int32_t* seq, const RopeCache& rope,
                          double head_grad_scale) {
  const int64_t N = in_tok_N_.size(0), T = rope.cos_TR2.size(0), B = N / T;
  shifted_tokens(seq, B, T, k_, in_tok_N_.i32(), tgt_N_.i32());
  vocab_parallel_embedding_forward(tp_, in_tok_N_, embed_->value, e_ND_);
  ops::rmsnorm_forward(e_ND_, enorm_->value, eps_, en_ND_, e_rstd_N_);
  ops::rmsnorm_forward(h_prev_ND, hnorm_->value, eps_, hn_ND_, h_rstd_N_);
  ops::concat_cols(en_ND_, hn_ND_, cat_N2D_, cat_q_);
  ops::linear_forward(cat_N2D_, eh_proj_->value, x_ND_,
                      {.precision = eh_lin_, .wq = eh_proj_->operands(), .xq = &cat_q_});
  block_.forward(x_ND_, out_ND_, rope);
  return head_.forward(out_ND_, tgt_N_, head_grad_scale);
}

void MtpModule::backward(const Tensor& h_prev_ND, const Tensor& d_out_ND, double loss_weight,
                         Tensor& dh_prev_ND, const RopeCache& rope, const LossScales& ls) {
  head_.backward(out_ND_, tgt_N_, loss_weight * ls.grad_scale, dout_ND_, false);
  if (!d_out_ND.empty()) ops::add_inplace(dout_ND_, d_out_ND, 1.0);
  block_.recompute(x_ND_, rope);  // what recomputation dropped (model/recompute.h)
  block_.backward(dout_ND_, x_ND_, dx_ND_, false, rope, ls);
  token_linear_backward(wgrad_, tp_, dx_ND_, cat_N2D_, eh_proj_->value, dcat_N2D_, eh_proj_->grad,
                        {.precision = eh_lin_, .wq = eh_proj_->operands(), .xq = &cat_q_});
  ops::split_cols(dcat_N2D_, den_ND_, dhn_ND_);
  norm_backward(tp_, dhn_ND_, h_prev_ND, hnorm_->value, h_rstd_N_, dh_prev_ND, true, hnorm_->grad);
  norm_backward(tp_, den_ND_, e_ND_, enorm_->value, e_rstd_N_, de_ND_, false, enorm_->grad);
  if (de_out_)
    ops::copy(de_ND_, *de_out_);
  else
    vocab_parallel_embedding_backward(tp_, in_tok_N_, de_ND_, embed_->grad);
}

}  // namespace moet
