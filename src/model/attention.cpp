#include "model/attention.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/operands.h"
#include "model/sequence_parallel.h"
#include "model/tensor_parallel.h"
#include "model/weight_grads.h"

namespace moet {

MlaAttention::MlaAttention(const ModelConfig& c, ParamStore& ps, const std::string& p,
                           const ops::LinearPrecision& lin, ops::Format attn,
                           const TensorParallel& tp)
    : tp_(tp),
      H_(tp.local(c.num_attention_heads, "attention heads")),
      P_(c.qk_nope_head_dim),
      R_(c.qk_rope_head_dim),
      U_(c.v_head_dim),
      Q_(c.q_lora_rank),
      C_(c.kv_lora_rank),
      eps_(c.rms_norm_eps),
      lin_(lin),
      attn_(attn) {
  const int64_t D = c.hidden_size;
  q_a_ = ps.declare(p + "q_a_proj.weight", {Q_, D}, Init::Normal, true);
  q_a_norm_ = ps.declare(p + "q_a_layernorm.weight", {Q_}, Init::Ones, false);
  q_b_ = ps.declare(p + "q_b_proj.weight", {H_ * (P_ + R_), Q_}, Init::Normal, true);
  kv_a_ = ps.declare(p + "kv_a_proj_with_mqa.weight", {C_ + R_, D}, Init::Normal, true);
  kv_a_norm_ = ps.declare(p + "kv_a_layernorm.weight", {C_}, Init::Ones, false);
  kv_b_ = ps.declare(p + "kv_b_proj.weight", {H_ * (P_ + U_), C_}, Init::Normal, true);
  o_ = ps.declare(p + "o_proj.weight", {D, H_ * U_}, Init::Normal, true);
  for (Weight* w : {q_a_, q_b_, kv_a_, kv_b_, o_}) ps.reserve_operands(w, lin);
  if (tp.active()) {  // this part's heads: rows of the up-projections, columns of o
    ps.set_shard(q_b_, tp.shard(0));
    ps.set_shard(kv_b_, tp.shard(0));
    ps.set_shard(o_, tp.shard(1));
  }
}

void MlaAttention::plan(Workspace& ws) {
  wgrad_ = ws.wgrad;
  B_ = ws.B;
  T_ = ws.T;
  // N: every token (the up-projections, core attention); S: this part's (x, the down-projections
  // and their norms; N without sequence parallelism)
  const int64_t N = ws.N(), S = tp_.tokens(N), K = P_ + R_, W = P_ + U_;
  Arena& a = ws.act;
  cq_raw_NQ_ = a.alloc_f32({S, Q_});
  cq_rstd_N_ = a.alloc_f32({S});
  ckv_NC_ = a.alloc_f32({S, C_});
  ckv_rstd_N_ = a.alloc_f32({S});
  q_NHK_ = ws.kept(RecomputeModule::kMlaUpProj).alloc_f32({N, H_, K});
  k_NHK_ = ws.kept(RecomputeModule::kMlaUpProj).alloc_f32({N, H_, K});
  v_NHU_ = ws.kept(RecomputeModule::kMlaUpProj).alloc_f32({N, H_, U_});
  // the rotated rope key: a temporary, unless the keys are made again from it
  kr_NR_ = (ws.recomputes(RecomputeModule::kMlaUpProj) ? a : ws.scratch).alloc_f32({N, R_});
  lse_BHT_ = ws.kept(RecomputeModule::kCoreAttn).alloc_f32({B_, H_, T_});
  o_NHU_ = ws.kept(RecomputeModule::kCoreAttn).alloc_f32({N, H_, U_});
  // the normalised latents are read only by q_b and kv_b (made again with them, as Megatron's
  // norm-fused up-projections are); o also by attention's backward
  // Under sequence parallelism the normalised latents are kept on this part's tokens and
  // gathered into temporaries for the up-projections, again in backward for their weight
  // gradients (as Megatron keeps a column-parallel input's shard).
  Arena& up = ws.kept(RecomputeModule::kMlaUpProj);
  Arena& s = ws.scratch;
  Arena& whole = tp_.sequence_parallel ? s : up;
  const GemmInput cq = plan_gemm_input(whole, N, Q_, lin_),
                  ckvn = plan_gemm_input(whole, N, C_, lin_);
  cq_NQ_ = cq.values, cq_q_ = cq.q;
  ckvn_NC_ = ckvn.values, ckvn_q_ = ckvn.q;
  o_q_ = plan_input_operand(ws.kept(RecomputeModule::kCoreAttn), N, H_ * U_, lin_);
  if (tp_.sequence_parallel) {
    cq_shard_NQ_ = up.alloc_f32({S, Q_});
    ckvn_shard_NC_ = up.alloc_f32({S, C_});
    kr_shard_NR_ = s.alloc_f32({S, R_});
    staging_NX_ = s.alloc_f32({N, std::max(Q_, C_)});
    dkr_shard_NR_ = s.alloc_f32({S, R_});
  }
  kva_NA_ = s.alloc_f32({S, C_ + R_});
  kv_NHW_ = s.alloc_f32({N, H_, W});
  do_NHU_ = s.alloc_f32({N, H_, U_});
  dk_NHK_ = s.alloc_f32({N, H_, K});
  dv_NHU_ = s.alloc_f32({N, H_, U_});
  dkr_NR_ = s.alloc_f32({N, R_});
  dckvn_NC_ = s.alloc_f32({S, C_});
  dckv_NC_ = s.alloc_f32({S, C_});
  dcq_NQ_ = s.alloc_f32({S, Q_});
  // gradients read only by the projections' backward (dq also written by attention first)
  const GemmInput dkv = plan_gemm_input(s, N, H_ * W, lin_, true),
                  dkva = plan_gemm_input(s, S, C_ + R_, lin_, true),
                  dq = plan_gemm_input(s, N, H_ * K, lin_, true, true),
                  dcq_raw = plan_gemm_input(s, S, Q_, lin_, true);
  dkv_NHW_ = dkv.values.view({N, H_, W}), dkv_q_ = dkv.q;
  dkva_NA_ = dkva.values, dkva_q_ = dkva.q;
  dq_NHK_ = dq.values.view({N, H_, K}), dq_q_ = dq.q;
  dcq_raw_NQ_ = dcq_raw.values, dcq_raw_q_ = dcq_raw.q;
}

void MlaAttention::project_queries(const Tensor& x_ND, const ops::Operand& xq,
                                   const RopeCache& rope) {
  // queries: q = q_b(norm(q_a(x))), rope on the last R dims of each head
  ops::linear_forward(x_ND, q_a_->value, cq_raw_NQ_,
                      {.precision = lin_, .wq = q_a_->operands(), .xq = &xq});
  up_project_queries(rope);
}

void MlaAttention::latent_norm(const Tensor& latent_NC, const Weight& w, Tensor& rstd_N,
                               Tensor& shard_NC, const Tensor& out_NC, const ops::Operand& outq) {
  if (!tp_.sequence_parallel) {
    Tensor out = out_NC;
    return ops::rmsnorm_forward(latent_NC, w.value, eps_, out, rstd_N, outq);
  }
  ops::rmsnorm_forward(latent_NC, w.value, eps_, shard_NC, rstd_N);
  gather_latent(shard_NC, out_NC, outq);
}

void MlaAttention::gather_latent(const Tensor& shard_NC, const Tensor& out_NC,
                                 const ops::Operand& outq) {
  Tensor staging(staging_NX_.ptr, DType::F32, {out_NC.size(0), out_NC.size(1)});
  sp_gather_input(tp_, shard_NC, {out_NC, outq}, staging);
}

Tensor MlaAttention::shard_rows(const Tensor& table_TR2) const {
  if (!tp_.sequence_parallel) return table_TR2;
  const int64_t T = table_TR2.size(0), S = T / tp_.parts;
  return table_TR2.rows(tp_.part * S, (tp_.part + 1) * S);
}

void MlaAttention::up_project_queries(const RopeCache& rope) {
  latent_norm(cq_raw_NQ_, *q_a_norm_, cq_rstd_N_, cq_shard_NQ_, cq_NQ_, cq_q_);
  const int64_t N = cq_NQ_.size(0), K = P_ + R_;
  Tensor q2 = q_NHK_.view({N, H_ * K});
  ops::linear_forward(cq_NQ_, q_b_->value, q2,
                      {.precision = lin_, .wq = q_b_->operands(), .xq = &cq_q_});
  ops::rope_forward(q_NHK_, P_, rope.cos_TR2, rope.sin_TR2);
}

void MlaAttention::up_project_keys_values() {
  latent_norm(ckv_NC_, *kv_a_norm_, ckv_rstd_N_, ckvn_shard_NC_, ckvn_NC_, ckvn_q_);
  const int64_t N = ckvn_NC_.size(0);
  Tensor kv2 = kv_NHW_.view({N, H_ * (P_ + U_)});
  ops::linear_forward(ckvn_NC_, kv_b_->value, kv2,
                      {.precision = lin_, .wq = kv_b_->operands(), .xq = &ckvn_q_});
  ops::mla_split_kv(kv_NHW_, kr_NR_, k_NHK_, v_NHU_);
}

void MlaAttention::core_attention(const RopeCache& rope) {
  const int64_t N = B_ * T_, K = P_ + R_;
  // causal softmax attention, writing o_proj's operands as it goes where their blocks lie within
  // a head (element-wise formats)
  Tensor o4 = o_NHU_.view({B_, T_, H_, U_});
  const bool heads_write = !ops::is_fp8(o_q_.fmt);
  ops::attention_forward(q_NHK_.view({B_, T_, H_, K}), k_NHK_.view({B_, T_, H_, K}),
                         v_NHU_.view({B_, T_, H_, U_}), rope.softmax_scale, lse_BHT_, o4, attn_,
                         heads_write ? o_q_ : ops::Operand{});
  // FP8 blocks span heads: one pass, both ways
  if (!heads_write) ops::quantize_operand(o_NHU_.view({N, H_ * U_}), o_q_);
}

void MlaAttention::recompute(const RecomputeModules& modules, const RopeCache& rope) {
  if (modules.has(RecomputeModule::kMlaUpProj)) {
    up_project_queries(rope);
    up_project_keys_values();
  }
  if (modules.has(RecomputeModule::kCoreAttn)) core_attention(rope);
}

void MlaAttention::forward(const Tensor& x_ND, Tensor& y_ND, const RopeCache& rope,
                           const ops::Operand& xq) {
  const int64_t N = B_ * T_, S = x_ND.size(0);
  project_queries(x_ND, xq, rope);
  // keys and values: one projection to the compressed kv (first C outputs) and the shared rope
  // key (last R), rotated at its tokens' positions (under sequence parallelism this part's, then
  // gathered)
  ops::linear_forward(x_ND, kv_a_->value, kva_NA_,
                      {.precision = lin_, .wq = kv_a_->operands(), .xq = &xq});
  const bool sp = tp_.sequence_parallel;
  Tensor& kr_mine = sp ? kr_shard_NR_ : kr_NR_;
  ops::split_cols(kva_NA_, ckv_NC_, kr_mine);
  Tensor kr = kr_mine.view({S, 1, R_});
  ops::rope_forward(kr, 0, shard_rows(rope.cos_TR2), shard_rows(rope.sin_TR2));
  if (sp) sp_gather(tp_, kr_shard_NR_, kr_NR_);
  up_project_keys_values();
  core_attention(rope);
  row_parallel_forward(tp_, o_NHU_.view({N, H_ * U_}), o_->value, y_ND,
                       {.precision = lin_, .wq = o_->operands(), .xq = &o_q_});
}

namespace {
// A [rows, cols] F32 view of v, grown to fit.
Tensor scratch_tensor(std::vector<float>& v, int64_t rows, int64_t cols) {
  if (v.size() < size_t(rows * cols)) v.resize(size_t(rows * cols));
  return Tensor(v.data(), DType::F32, {rows, cols});
}
}  // namespace

// Attention over the latent cache with kv_b_proj absorbed: per head h, with W_UK[h] and W_UV[h]
// the P key rows and U value rows of kv_b_proj, q_nope·k_nopeᵀ = (q_nope·W_UK[h])·c_kvᵀ and the
// output o = W_UV[h]·(Σ_s p_s c_kv[s]) — the same products as forward, associated differently.
// Heads are outermost in the temporaries, so each head's rows are one contiguous block.
void MlaAttention::forward_cached(const Tensor& x_ND, Tensor& y_ND, const RopeCache& rope,
                                  LatentCache& cache, int64_t pos, const ops::Operand& xq) {
  const int64_t N = x_ND.size(0), K = P_ + R_, W = P_ + U_, S = pos + N;
  MOET_ASSERT(N == B_ * T_ && S <= cache.ckv_SC.size(0) && cache.scratch);
  project_queries(x_ND, xq, rope);
  // the tokens' latents go into the cache: normalised c_kv and the rotated rope key
  Tensor ckv = cache.ckv_SC.rows(pos, S), kr = cache.kpe_SR.rows(pos, S);
  ops::linear_forward(x_ND, kv_a_->value, kva_NA_,
                      {.precision = lin_, .wq = kv_a_->operands(), .xq = &xq});
  ops::split_cols(kva_NA_, ckv_NC_, kr);
  Tensor kr3 = kr.view({N, 1, R_});
  ops::rope_forward(kr3, 0, rope.cos_TR2, rope.sin_TR2);
  ops::rmsnorm_forward(ckv_NC_, kv_a_norm_->value, eps_, ckv, ckv_rstd_N_);
  DecodeScratch& sc = *cache.scratch;
  Tensor qn = scratch_tensor(sc.qn, H_ * N, P_), qr = scratch_tensor(sc.qr, H_ * N, R_),
         qc = scratch_tensor(sc.qc, H_ * N, C_), sco = scratch_tensor(sc.scores, H_ * N, S),
         oc = scratch_tensor(sc.oc, H_ * N, C_), v = scratch_tensor(sc.v, H_ * N, U_);
  const float* q = q_NHK_.f32();
  for (int64_t h = 0; h < H_; ++h)
    for (int64_t n = 0; n < N; ++n) {
      const float* src = q + (n * H_ + h) * K;
      std::copy(src, src + P_, qn.f32() + (h * N + n) * P_);
      std::copy(src + P_, src + K, qr.f32() + (h * N + n) * R_);
    }
  const Tensor& w_kv_b = kv_b_->value;  // [H·(P+U), C]
  for (int64_t h = 0; h < H_; ++h) {
    Tensor qc_h = qc.rows(h * N, (h + 1) * N);
    ops::gemm(qn.rows(h * N, (h + 1) * N), false, w_kv_b.rows(h * W, h * W + P_), false, qc_h);
  }
  const Tensor ckv_all = cache.ckv_SC.rows(0, S), kpe_all = cache.kpe_SR.rows(0, S);
  ops::gemm(qc, false, ckv_all, true, sco);
  ops::gemm(qr, false, kpe_all, true, sco, 1.0, 1.0);
  ops::causal_softmax_rows(sco, N, pos, rope.softmax_scale);
  ops::gemm(sco, false, ckv_all, false, oc);
  for (int64_t h = 0; h < H_; ++h) {
    Tensor v_h = v.rows(h * N, (h + 1) * N);
    ops::gemm(oc.rows(h * N, (h + 1) * N), false, w_kv_b.rows(h * W + P_, (h + 1) * W), true, v_h);
  }
  float* o = o_NHU_.f32();
  for (int64_t h = 0; h < H_; ++h)
    for (int64_t n = 0; n < N; ++n)
      std::copy(v.f32() + (h * N + n) * U_, v.f32() + (h * N + n + 1) * U_, o + (n * H_ + h) * U_);
  row_parallel_forward(tp_, o_NHU_.view({N, H_ * U_}), o_->value, y_ND,
                       {.precision = lin_, .wq = o_->operands()});
}

void MlaAttention::backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND,
                            const RopeCache& rope, const ops::Operand& dyq,
                            const ops::Operand& xq) {
  const int64_t N = B_ * T_, S = x_ND.size(0), K = P_ + R_;
  const bool sp = tp_.sequence_parallel;
  Tensor do2 = do_NHU_.view({N, H_ * U_});
  linear_backward(wgrad_, dy_ND, o_NHU_.view({N, H_ * U_}), o_->value, do2, o_->grad,
                  {.precision = lin_, .wq = o_->operands(), .xq = &o_q_, .dyq = &dyq});
  Tensor dq4 = dq_NHK_.view({B_, T_, H_, K}), dk4 = dk_NHK_.view({B_, T_, H_, K}),
         dv4 = dv_NHU_.view({B_, T_, H_, U_});
  ops::attention_backward(do_NHU_.view({B_, T_, H_, U_}), q_NHK_.view({B_, T_, H_, K}),
                          k_NHK_.view({B_, T_, H_, K}), v_NHU_.view({B_, T_, H_, U_}),
                          o_NHU_.view({B_, T_, H_, U_}), lse_BHT_, rope.softmax_scale, dq4, dk4,
                          dv4, attn_);
  // keys/values path
  ops::mla_split_kv_backward(dk_NHK_, dv_NHU_, dkv_NHW_, dkr_NR_, dkv_q_);
  // the shared rope key's gradient sums every head's: under tensor parallelism over the parts
  // (under sequence parallelism the latents' gradients are reduce-scattered to this part's
  // tokens, the down-projections' backward runs on them)
  if (tp_.active()) head_sum(tp_, dk_NHK_, P_, dkr_NR_);
  if (sp) sp_shard(tp_, dkr_NR_, dkr_shard_NR_, false);
  Tensor& dkr_mine = sp ? dkr_shard_NR_ : dkr_NR_;
  // the latents again for the up-projections' weight gradients (temporaries: a recomputation's
  // gather is overwritten by the FFN's backward, which shares their bytes)
  if (sp) gather_latent(ckvn_shard_NC_, ckvn_NC_, ckvn_q_);
  column_parallel_backward(
      wgrad_, tp_, 1, dkv_NHW_.view({N, H_ * (P_ + U_)}), ckvn_NC_, kv_b_->value, dckvn_NC_,
      kv_b_->grad, {.precision = lin_, .wq = kv_b_->operands(), .xq = &ckvn_q_, .dyq = &dkv_q_});
  norm_backward(tp_, dckvn_NC_, ckv_NC_, kv_a_norm_->value, ckv_rstd_N_, dckv_NC_, false,
                kv_a_norm_->grad);
  Tensor dkr = dkr_mine.view({S, 1, R_});
  ops::rope_backward(dkr, 0, shard_rows(rope.cos_TR2), shard_rows(rope.sin_TR2));
  ops::concat_cols(dckv_NC_, dkr_mine, dkva_NA_, dkva_q_);
  token_linear_backward(wgrad_, tp_, dkva_NA_, x_ND, kv_a_->value, dx_ND, kv_a_->grad,
                        {.precision = lin_, .wq = kv_a_->operands(), .xq = &xq, .dyq = &dkva_q_});
  // query path
  ops::rope_backward(dq_NHK_, P_, rope.cos_TR2, rope.sin_TR2, dq_q_);
  if (sp) gather_latent(cq_shard_NQ_, cq_NQ_, cq_q_);
  column_parallel_backward(
      wgrad_, tp_, 1, dq_NHK_.view({N, H_ * K}), cq_NQ_, q_b_->value, dcq_NQ_, q_b_->grad,
      {.precision = lin_, .wq = q_b_->operands(), .xq = &cq_q_, .dyq = &dq_q_});
  norm_backward(tp_, dcq_NQ_, cq_raw_NQ_, q_a_norm_->value, cq_rstd_N_, dcq_raw_NQ_, false,
                q_a_norm_->grad, dcq_raw_q_);
  token_linear_backward(wgrad_, tp_, dcq_raw_NQ_, x_ND, q_a_->value, dx_ND, q_a_->grad,
                        {.precision = lin_,
                         .wq = q_a_->operands(),
                         .xq = &xq,
                         .dyq = &dcq_raw_q_,
                         .accumulate = true});
}

}  // namespace moet
