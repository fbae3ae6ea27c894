// Model: a DeepSeek-V3-style transformer (embedding, decoder blocks, final norm, LM head, MTP
// modules) with its parameters, activation memory planned once for a (B, T) micro-batch shape,
// and a hand-written forward and backward. Knows nothing of parallelism: experts are reached
// through the TokenDispatcher each MoE layer is given.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "model/block.h"
#include "model/lm_head.h"
#include "model/mtp.h"
#include "model/weight_grads.h"

namespace moet {

class TraceRecorder;
class KvCache;
class Model;

struct LossWeights {
  double mtp_lambda = 0.3;
  double balance_alpha = 1e-4;
  double z_loss_coef = 0.0;
};

// Losses of one micro-batch (docs/model.md, "Losses"). mtp/balance/z are unweighted sums.
// What recomputation saves (Model::recompute_memory).
struct RecomputeMemory {
  int64_t recomputed_bytes = 0;                  // the activations made again, over all layers
  int64_t region_bytes = 0;                      // the region they share (one layer's or group's)
  int64_t module_bytes[kRecomputeModules] = {};  // selective: each module's recomputed_bytes
};

struct LossBreakdown {
  double loss = 0;
  double lm_loss = 0;
  double mtp_loss = 0;
  double balance_loss = 0;
  double z_loss = 0;
};

using DispatcherFactory = std::function<std::unique_ptr<TokenDispatcher>(int64_t n_experts)>;

// The slots of the model one Model instance holds: all of them (one process, data and expert
// parallelism), or one pipeline stage's (docs/pipeline.md): the embedding, a run of decoder
// layers, and the loss with the MTP modules (final norm, LM head, MTP layers, cross-entropy).
// A stage without the embedding reads its input from input(); one without the loss leaves its
// output in output() and reads that output's gradient from output_grad().
struct ModelPart {
  bool embedding = true;
  int64_t first_layer = 0;
  int64_t end_layer = -1;  // one past the last decoder layer (-1: num_hidden_layers)
  bool loss = true;
  // A part with the loss but not the embedding on a rank that also holds the embedding's part
  // (the V schedules' rank 0): its MTP modules read the embedding itself instead of a replica,
  // and still hand their gradients to the embedding's part.
  bool embedding_on_rank = false;
};

// What one Model instance is, besides its config (Model's one constructor).
struct ModelSpec {
  // Activations are planned for micro-batches of micro_batch (B) sequences of seq_len (T) tokens.
  int64_t micro_batch = 0;
  int64_t seq_len = 0;
  LossWeights loss_weights = {};
  DispatcherFactory dispatchers = nullptr;  // each MoE layer's (null: LocalDispatcher)
  PrecisionPolicy precision = {};           // which format each GEMM runs in
  // Which activations of the decoder layers are made again before their backward instead of
  // kept (model/recompute.h).
  RecomputePlan recompute = {};
  // One pipeline stage's part; the default is the whole model. With the loss but not the
  // embedding, the MTP modules read a replica of the embedding (ParamStore's Weight::replica) and
  // leave its gradient rows in mtp_embedding_grads().
  ModelPart part = {};
  // Null: the model declares and allocates its own parameters (uninitialised until
  // init_parameters or a load). Else it declares them into *store (in shared mode, so a pipeline
  // rank's chunks and micro-batch slots share them), which the caller allocates and initialises.
  ParamStore* store = nullptr;
  // Not null: a second lane over shared's parameters and gradients, with its own activations
  // and dispatchers, and shared's part, precision and recomputation (those of the spec are not
  // read; store must be null). With --a2a-overlap each micro-batch is split over two lanes whose
  // stages interleave, so one lane's all-to-alls travel under the other lane's compute.
  Model* shared = nullptr;
  // The tensor-parallel part this rank holds (model/tensor_parallel.h): attention's heads, the
  // dense MLPs' and shared experts' FFN dimension, the vocabulary; and whether sums over a split
  // dimension are TP-invariant (--deterministic). Not read with `shared` (shared's is used).
  TensorParallel tp = {};
};

class Model {
 public:
  // Declares the parameters and plans the activations (ModelSpec).
  Model(const ModelConfig& c, const ModelSpec& spec);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  void init_parameters(uint64_t seed);
  // Forward over B sequences of T+1 tokens (tokens_BT1, row-major). Returns the losses.
  // grad_scale != 0 announces the backward(grad_scale) to come: the LM heads then take their
  // projection's gradient in forward, from the logits at hand (no recompute in backward).
  LossBreakdown forward(const int32_t* tokens_BT1, double grad_scale = 0);
  // Backward of the last forward; parameter gradients accumulate, scaled by grad_scale.
  void backward(double grad_scale);

  // forward() and backward() in pieces, for interleaving two lanes: begin, then every decoder
  // layer's stages (model/moe_stages.h; forward: layers up; backward: layers down), then end.
  void forward_begin(const int32_t* tokens_BT1, double grad_scale = 0);
  void forward_stage(int64_t layer, MoeStage stage);
  LossBreakdown forward_end();
  void backward_begin(double grad_scale);
  void backward_stage(int64_t layer, MoeStage stage);
  void backward_end();
  // Decoder layers of this part; forward_stage and backward_stage number them from 0 (the
  // part's first layer).
  int64_t num_layers() const { return int64_t(blocks_.size()); }
  const ModelPart& part() const { return part_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Pipeline hand-offs (ModelPart): the input hidden state (write before forward_begin's stages
  // when the part has no embedding), the output hidden state, the gradient of the output (write
  // before backward_begin when the part has no loss) and that of the input (after backward_end).
  Tensor& input() { return hidden_.front(); }
  const Tensor& output() const { return hidden_.back(); }
  Tensor& output_grad() { return layer_output_grad(num_layers() - 1); }
  const Tensor& input_grad() { return num_layers() % 2 == 1 ? dh_b_ND_ : dh_a_ND_; }
  // MTP module k's gradient of its embedded input tokens (k = 1.. at index k − 1), [B·T, D] (this
  // part's tokens under sequence parallelism):
  // filled by the backward of a part with the loss but not the embedding; on a part with the
  // embedding but not the loss, the caller writes them before backward_end, which scatters them
  // into the embedding's gradient before its own, in the order one process adds them. Empty
  // for a whole model.
  std::vector<Tensor>& mtp_embedding_grads() { return mtp_de_; }
  // Called during backward as soon as a decoder block's parameter gradients are complete, with
  // its layer index (MTP module k: num_hidden_layers + k - 1): data parallelism starts reducing
  // them while the backward goes on.
  void set_backward_hook(std::function<void(int64_t layer)> hook) { hook_ = std::move(hook); }
  // The zero-bubble pipeline schedules' split backward (parallel/pipeline_schedule.h): while on,
  // each backward computes the input gradients (and the norms', the router's and the
  // embedding's gradients) and keeps the linear layers' weight gradients (model/weight_grads.h);
  // weight_gradients() then computes the oldest kept backward's, the same bits as at once, and
  // runs the backward hooks it held back. Kept backwards finish in the order they ran.
  void defer_weight_gradients(bool on);
  void weight_gradients();
  // Backwards whose weight gradients are kept and not yet computed.
  int64_t deferred_backwards() const { return int64_t(held_hooks_.size()); }
  int64_t kept_weight_gradient_bytes() const { return wgrad_.kept_bytes(); }
  // Buffers the kept copies have allocated so far (they are pooled and reused).
  int64_t weight_gradient_buffers() const { return wgrad_.buffers_allocated(); }
  // Records each block's forward and backward stages (trace::kLayer), and inside them
  // attention, router, experts, dense MLP, and the LM head, as spans on the recorder's
  // "compute" lane (null: none).
  void set_trace(TraceRecorder* rec);

  const ModelConfig& config() const { return cfg_; }
  const PrecisionPolicy& precision() const { return precision_; }
  ParamStore& params() { return shared_ ? shared_->params() : *store_; }
  // The main logits of the last forward, recomputed into logits_NV ([B*T, V], F32): the LM head
  // keeps only each row's log-sum-exp.
  void logits(Tensor& logits_NV) { head_->logits(logits_NV); }
  // Inference (docs/generate.md): runs the T tokens of a B = 1 model at positions
  // [cache.length(), + T) over the KV cache, appends their latents to it, and writes the logits
  // of the last R tokens into logits_RV ([R, V], 1 <= R <= T). MoE routing as in forward; the
  // MTP modules are not run. A whole model only (ModelPart{}).
  void forward_cached(const int32_t* tokens_T, KvCache& cache, Tensor& logits_RV);
  const std::vector<MoeLayer*>& moe_layers() const { return moe_layers_; }
  // The total loss of one forward from its parts (lm, mtp, balance and z sums): the one
  // expression forward_end uses, for callers that add the parts up themselves.
  double total_loss(const LossBreakdown& parts) const;
  int64_t micro_batch() const { return B_; }
  int64_t seq_len() const { return T_; }
  size_t activation_bytes() const {
    return act_.capacity() + scratch_.capacity() + recompute_.capacity();
  }
  // Its parts: kept from forward to backward; the temporaries of one layer call; the region
  // recomputed layers share.
  size_t kept_activation_bytes() const { return act_.capacity(); }
  size_t temporary_activation_bytes() const { return scratch_.capacity(); }
  size_t recompute_region_bytes() const { return recompute_.capacity(); }
  // What recomputation saves: the recomputed activations' bytes over all layers (per module
  // under selective) and the region they share instead (included in activation_bytes()).
  const RecomputePlan& recompute_plan() const { return recompute_plan_; }
  const RecomputeMemory& recompute_memory() const { return recompute_memory_; }

 private:
  void plan_all(Arena& act, Arena& scratch, Arena& recompute);
  // Before decoder layer l's backward: what recomputation dropped, made again.
  void recompute_before_backward(int64_t l);
  Tensor& layer_output_grad(int64_t layer);
  // A block's (or MTP module's) parameter gradients are complete: the hook now, or held until
  // weight_gradients() while deferring.
  void gradients_done(int64_t layer);

  ModelConfig cfg_;
  PrecisionPolicy precision_;
  int64_t B_, T_;
  LossWeights lw_;
  ModelPart part_;
  TensorParallel tp_;
  ParamStore params_;
  ParamStore* store_ = &params_;  // where the parameters are declared
  Weight *embed_ = nullptr, *lm_head_ = nullptr;
  std::vector<std::unique_ptr<DecoderBlock>> blocks_;
  std::unique_ptr<LmHead> head_;
  std::vector<std::unique_ptr<MtpModule>> mtp_;
  std::vector<MoeLayer*> moe_layers_;
  Arena act_ = Arena::planning(), scratch_ = Arena::planning(), recompute_ = Arena::planning();
  RecomputePlan recompute_plan_;
  std::vector<int64_t> group_start_;  // full: each layer's group's first layer (-1: kept)
  RecomputeMemory recompute_memory_;
  RopeCache rope_;
  Tensor tokens_BT1_, inputs_N_, targets_N_;
  std::vector<Tensor> hidden_;  // hidden_[l]: input of block l; hidden_[L]: final
  Tensor dh_a_ND_, dh_b_ND_, dmtp_a_ND_, dmtp_b_ND_;
  std::vector<Tensor> mtp_de_;  // ModelPart hand-off of the MTP modules' embedding gradients
  Tensor mtp_tok_N_;            // their tokens, on the embedding's stage
  std::function<void(int64_t)> hook_;
  WeightGrads wgrad_;                            // the layers' weight gradients (Workspace)
  std::deque<std::vector<int64_t>> held_hooks_;  // per kept backward: the hooks held back
  Model* shared_ = nullptr;                      // the lane whose parameters this one uses
  LossScales ls_;                                // of the backward in progress
  double head_grad_scale_ = 0;                   // announced by forward_begin
  TraceRecorder* trace_ = nullptr;
  int trace_lane_ = 0;
  std::vector<const char*> fwd_names_, bwd_names_;  // per block, then per MTP module
};

}  // namespace moet
