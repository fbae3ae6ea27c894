// Multi-token prediction module k (DeepSeek-V3): h' = eh_proj([enorm(embed(t+k)) | hnorm(h)]),
// a decoder block, and its own LM head (own norm, shared projection). docs/model.md.
#pragma once
#include <memory>
#include <string>

#include "model/block.h"
#include "model/lm_head.h"

namespace moet {

class WeightGrads;

class MtpModule {
 public:
  // depth: k >= 1; prefix: "model.layers.{num_hidden_layers + k - 1}.".
  MtpModule(const ModelConfig& c, ParamStore& ps, const std::string& prefix, int64_t depth,
            Weight* embed, Weight* head, std::unique_ptr<TokenDispatcher> dispatcher,
            const PrecisionPolicy& precision = {}, const TensorParallel& tp = {});
  // block_ws: where its decoder block plans (the recompute region's under recomputation; the same
  // scratch).
  void plan(Workspace& ws, Workspace& block_ws);
  // Mean MTP loss of this depth; tokens_BT1 holds B sequences of T+1 tokens.
  // head_grad_scale: passed to the LM head (LmHead::forward): the scale of its part of the
  // backward to come, or 0.
  double forward(const Tensor& h_prev_ND, const int32_t* tokens_BT1, const RopeCache& rope,
                 double head_grad_scale = 0);
  // The module's output hidden state (input of the next module).
  const Tensor& output() const { return out_ND_; }
  // dh_prev += gradient of (loss_weight × this module's loss + ⟨d_out, output⟩); d_out may be
  // empty (last module).
  void backward(const Tensor& h_prev_ND, const Tensor& d_out_ND, double loss_weight,
                Tensor& dh_prev_ND, const RopeCache& rope, const LossScales& ls);
  DecoderBlock& block() { return block_; }
  // Pipeline stages (ModelPart): backward copies the gradient of the embedded input tokens into
  // *out ([B·T, D], or this part's tokens under sequence parallelism) instead of adding it to the
  // embedding's gradient, which another stage holds.
  void export_embedding_grad(Tensor* out) { de_out_ = out; }
  // Module k's input tokens (t + k, 0 past the end) and targets (t + k + 1, −1 past the end) of
  // B sequences of T + 1 tokens; either output may be null.
  static void shifted_tokens(const int32_t* tokens_BT1, int64_t B, int64_t T, int64_t k,
                             int32_t* in_N, int32_t* tgt_N);
  LmHead& head() { return head_; }

 private:
  TensorParallel tp_;  // the vocabulary part of the embedding it reads
  int64_t k_;
  double eps_;
  Weight *embed_, *enorm_, *hnorm_, *eh_proj_;
  ops::LinearPrecision eh_lin_;
  DecoderBlock block_;
  LmHead head_;
  // kept
  Tensor in_tok_N_, tgt_N_, e_ND_, en_ND_, e_rstd_N_, hn_ND_, h_rstd_N_, cat_N2D_, x_ND_, out_ND_;
  // temporaries
  ops::Operand cat_q_;  // cat as eh_proj reads it (model/operands.h's GemmInput)
  Tensor dout_ND_, dx_ND_, dcat_N2D_, den_ND_, dhn_ND_, de_ND_;
  Tensor* de_out_ = nullptr;
  WeightGrads* wgrad_ = nullptr;  // where backward sends its weight gradients (plan)
};

}  // namespace moet
