// Multi-head latent attention (MLA), forward and backward.
#pragma once
#include <string>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/params.h"
#include "model/tensor_parallel.h"
#include "model/workspace.h"

namespace moet {

class WeightGrads;

// Per-shape constants shared by every attention layer: RoPE tables and the softmax scale.
struct RopeCache {
  Tensor cos_TR2, sin_TR2;
  double softmax_scale = 1.0;
};

struct LatentCache;  // model/kv_cache.h

class MlaAttention {
 public:
  // lin: the formats of the projections' GEMMs; attn: of core attention's products
  // (PrecisionPolicy). tp: the part of the heads this rank holds (model/tensor_parallel.h): the
  // query and key/value up-projections are column-parallel by heads, the output projection
  // row-parallel; the down-projections and their norms are replicated. Under sequence
  // parallelism (model/sequence_parallel.h) x is this part's tokens, as are y and dx: the
  // down-projections and their norms run on them (their weight gradients summed over the parts'
  // tokens), and the latents are all-gathered before the up-projections, as Megatron does.
  MlaAttention(const ModelConfig& c, ParamStore& ps, const std::string& prefix,
               const ops::LinearPrecision& lin = {}, ops::Format attn = ops::Format::F32,
               const TensorParallel& tp = {});
  void plan(Workspace& ws);
  // y_ND = attention(x_ND); x (and xq) must stay unchanged until backward. xq: x's operands in
  // the projections' formats (plan_input_operand), written by x's producer; empty: none.
  void forward(const Tensor& x_ND, Tensor& y_ND, const RopeCache& rope,
               const ops::Operand& xq = {});
  // dx_ND = d/dx (overwritten); weight gradients accumulate. dyq: dy's operands
  // (plan_grad_operand), written by dy's producer; xq as forward's.
  void backward(const Tensor& dy_ND, const Tensor& x_ND, Tensor& dx_ND, const RopeCache& rope,
                const ops::Operand& dyq = {}, const ops::Operand& xq = {});
  // Recomputation, just before backward (model/recompute.h): the up-projections' outputs
  // (`mla_up_proj`: the queries, keys and values) and core attention's (`core_attn`: its output
  // and log-sum-exp) made again from what forward kept, as forward made them.
  void recompute(const RecomputeModules& modules, const RopeCache& rope);
  // Inference with a KV cache (the one decode-only path of the model, docs/generate.md): the
  // N = x_ND.size(0) tokens at positions [pos, pos + N) (rope: their tables, from position pos)
  // write their latents into the cache's rows and attend over rows [0, pos + N), kv_b_proj
  // absorbed into the queries and the outputs. Needs a plan for exactly N tokens.
  void forward_cached(const Tensor& x_ND, Tensor& y_ND, const RopeCache& rope, LatentCache& cache,
                      int64_t pos, const ops::Operand& xq = {});

 private:
  // q_NHK_ = the rotated queries of x (both forward paths).
  void project_queries(const Tensor& x_ND, const ops::Operand& xq, const RopeCache& rope);
  // The latents' norms and the up-projections: q_NHK_ from the query latent (rotated), k_NHK_
  // and v_NHU_ from the kv latent and the rotated rope key.
  void up_project_queries(const RopeCache& rope);
  void up_project_keys_values();
  // o_NHU_, lse_BHT_ and o's operands from q, k and v.
  void core_attention(const RopeCache& rope);
  // out = norm(latent) for an up-projection: over every token (under sequence parallelism the
  // latent is this part's tokens, normalised into shard_NC, then all-gathered).
  void latent_norm(const Tensor& latent_NC, const Weight& w, Tensor& rstd_N, Tensor& shard_NC,
                   const Tensor& out_NC, const ops::Operand& outq);
  // Under sequence parallelism: a normalised latent (every token, with its operands) gathered
  // from this part's tokens.
  void gather_latent(const Tensor& shard_NC, const Tensor& out_NC, const ops::Operand& outq);
  // RoPE tables of this part's positions (the whole sequence's without sequence parallelism).
  Tensor shard_rows(const Tensor& table_TR2) const;

  TensorParallel tp_;
  int64_t H_, P_, R_, U_, Q_, C_;  // H_: this part's heads
  double eps_;
  ops::LinearPrecision lin_;
  ops::Format attn_;
  Weight *q_a_, *q_a_norm_, *q_b_, *kv_a_, *kv_a_norm_, *kv_b_, *o_;
  // kept for backward
  Tensor cq_raw_NQ_, cq_NQ_, cq_rstd_N_, ckv_NC_, ckvn_NC_, ckv_rstd_N_, q_NHK_, k_NHK_, v_NHU_,
      lse_BHT_, o_NHU_;
  // sequence parallelism's: the latents' norms' outputs on this part's tokens (kept; cq_NQ_ and
  // ckvn_NC_, gathered, are then temporaries), the rope key there before its gather, a gather's
  // staging, the rope key's gradient on the shard
  Tensor cq_shard_NQ_, ckvn_shard_NC_, kr_shard_NR_, staging_NX_, dkr_shard_NR_;
  // temporaries
  Tensor kva_NA_, kr_NR_, kv_NHW_, do_NHU_, dq_NHK_, dk_NHK_, dv_NHU_, dkv_NHW_, dkr_NR_, dckvn_NC_,
      dckv_NC_, dkva_NA_, dcq_NQ_, dcq_raw_NQ_;
  // operands written by their producers (model/operands.h): kept (GEMM inputs of forward), then
  // temporaries (gradients)
  ops::Operand cq_q_, ckvn_q_, o_q_;
  ops::Operand dkv_q_, dkva_q_, dq_q_, dcq_raw_q_;
  int64_t B_ = 0, T_ = 0;
  WeightGrads* wgrad_ = nullptr;  // where backward sends its weight gradients (plan)
};

}  // namespace moet
