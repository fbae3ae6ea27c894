// Decoder block: h + attn(norm(h)), then + ffn(norm(·)); the FFN is a dense SwiGLU MLP or an
// MoE layer.
#pragma once
#include <memory>
#include <string>

#include "model/attention.h"
#include "model/mlp.h"
#include "model/moe_layer.h"
#include "model/recipe.h"

namespace moet {

class DecoderBlock {
 public:
  // prefix: "model.layers.{i}."; dispatcher is used (and required) when moe is true. layer:
  // the decoder layer index the precision policy places it by (MTP blocks: num_hidden_layers +
  // k - 1).
  DecoderBlock(const ModelConfig& c, ParamStore& ps, const std::string& prefix, bool moe,
               std::unique_ptr<TokenDispatcher> dispatcher, const PrecisionPolicy& precision = {},
               int64_t layer = 0, const TensorParallel& tp = {});
  void plan(Workspace& ws);
  // out = block(in); `in` must stay unchanged until backward.
  void forward(const Tensor& in_ND, Tensor& out_ND, const RopeCache& rope);
  // din (= or += when accumulate_din) from dout.
  void backward(const Tensor& dout_ND, const Tensor& in_ND, Tensor& din_ND, bool accumulate_din,
                const RopeCache& rope, const LossScales& ls);
  // The same in the stages of model/moe_stages.h, split where an MoE layer's exchanges are in
  // flight (a dense block runs its MLP in the first forward and the last backward stage):
  // another micro-batch's stages can run in between.
  void forward_stage(MoeStage stage, const Tensor& in_ND, Tensor& out_ND, const RopeCache& rope);
  void backward_stage(MoeStage stage, const Tensor& dout_ND, const Tensor& in_ND, Tensor& din_ND,
                      bool accumulate_din, const RopeCache& rope, const LossScales& ls);
  // Recomputation, just before the block's backward (model/recompute.h): the modules its plan put
  // in the recompute region (--recompute-granularity selective), or the whole forward again from
  // `in` when it was planned whole into the region (full; the output is discarded: it is the
  // next layer's kept input). Nothing when it keeps everything.
  void recompute(const Tensor& in_ND, const RopeCache& rope);
  // Inference: as forward, attention over the KV cache (MlaAttention::forward_cached).
  void forward_cached(const Tensor& in_ND, Tensor& out_ND, const RopeCache& rope,
                      LatentCache& cache, int64_t pos);
  MoeLayer* moe() { return moe_.get(); }
  // Records attention, the dense MLP and the MoE layer's parts as spans on `lane` (null: none).
  void set_trace(TraceRecorder* rec, int lane);

 private:
  // a_ND_ = in + attention(norm(in)), an_ND_ = norm(a_ND_); over the cache when one is given.
  void attention_part(const Tensor& in_ND, const RopeCache& rope, LatentCache* cache, int64_t pos);
  // an = the post-attention norm of a, as the FFN's GEMMs read it (values and operands, every
  // token): under sequence parallelism the norm of this part's tokens (kept), then gathered.
  void post_attention_norm();
  // Under sequence parallelism: an and its operands gathered from the kept shard (the FFN's
  // forward, its recomputation and its backward each gather it).
  void gather_ffn_input();

  TensorParallel tp_;
  double eps_;
  ops::LinearPrecision lin_;  // the formats of its attention and FFN GEMMs
  Weight *in_norm_, *post_norm_;
  MlaAttention attn_;
  std::unique_ptr<SwiGluMlp> mlp_;
  std::unique_ptr<MoeLayer> moe_;
  // kept (in, out, a, xn, the rstds: this part's tokens under sequence parallelism; an, the
  // FFN's input: every token — under sequence parallelism a temporary, an_shard kept)
  Tensor xn_ND_, rstd1_N_, a_ND_, an_ND_, rstd2_N_;
  ops::Operand xn_q_, an_q_;  // the norms' outputs as attention's and the FFN's GEMMs read them
  // temporaries (this part's tokens under sequence parallelism)
  Tensor da_ND_, dxn_ND_;
  // sequence parallelism's: the post-attention norm's output on this part's tokens (kept), a
  // gather's staging, the output's gradient and da gathered
  Tensor an_shard_ND_, staging_ND_, dout_all_ND_, da_all_ND_;
  ops::Operand da_q_;           // o_proj's dy, written by the post-attention norm's backward
  RecomputeModules recompute_;  // the selective modules its plan put in the recompute region
  bool recompute_whole_ = false;
  TraceRecorder* trace_ = nullptr;
  int trace_lane_ = 0;
};

}  // namespace moet
