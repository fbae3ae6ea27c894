// DataParallel: what a training step does across ranks — gradient reduction (expert weights
// over the expert-data-parallel group, everything else over the world, each in the canonical
// order), the global gradient norm, and the global losses and expert loads.
//
// With ZeRO-1 (zero1 = true, docs/parallel.md) the buckets are reduce-scattered instead: each
// rank ends up with the reduced gradient of its own range only, and optimizer_step() updates
// those ranges with moments only this rank keeps and all-gathers the parameters.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"
#include "optim/adamw.h"
#include "parallel/comm_stream.h"
#include "parallel/layout.h"
#include "parallel/zero1.h"

namespace moet {

class DataParallel {
 public:
  // stream: where the reductions run (a communication thread, so they overlap the backward);
  // null: they run in reduce_gradients().
  // zero1: shard the optimizer state (the StepRunner then makes an AdamW without moments).
  DataParallel(ParallelLayout& layout, ParamStore& params, CommStream* stream = nullptr,
               bool zero1 = false, MomentDtypes moments = {});
  // Arms the bucket reductions for the coming backward (the step's last micro-batch): each
  // decoder block's gradients start reducing as soon as on_layer_done() reports the block.
  void arm() { armed_ = true; }
  void on_layer_done(int64_t layer);
  // Reduces what is left, waits for every bucket, and divides by the world size (the loss is a
  // mean over all ranks' tokens): gradients are then summed over their group (expert weights
  // over the expert-data-parallel group, the rest over the world). With ZeRO-1 only this
  // rank's ranges hold reduced gradients (the rest of the arena is left as it was).
  void reduce_gradients() { reduce_gradients(1.0 / double(layout_.size())); }
  // The same, multiplying by `scale` instead (1: plain sums, as --deterministic wants them).
  void reduce_gradients(double scale);
  // The same for the buckets inside arena elements [begin, end) only (a pipeline chunk's
  // weights; a bucket never straddles chunks, as a chunk's weights are whole layers).
  void reduce_gradient_range(int64_t begin, int64_t end, double scale);
  // Seconds the reductions took, and seconds the step waited for them, since the last call.
  double take_sync_seconds(double* exposed);
  // Bytes this rank sent to other ranks for the gradient reductions (and ZeRO-1's parameter
  // all-gather) since the last call: moet's all-reduce is a reduce-scatter then an all-gather,
  // so a bucket of n floats over a group of P ranks, in which this rank owns a slice of s,
  // sends 4·(n − s) + 4·(P − 1)·s bytes (≈ 2(P−1)/P × 4n; exactly 4n at P = 2).
  int64_t take_sync_bytes();
  // sqrt(Σ g²) over all parameters of the model (expert shards of the whole ep group counted
  // once); the same on every rank.
  double global_grad_norm(const AdamW& optimizer);
  // Under pipeline parallelism this rank holds one stage's weights: `combine` puts the stages'
  // sums together into the model's norm (PipelineGradNorm).
  void set_norm_combiner(std::function<double(const SquareSums&)> combine) {
    combine_norm_ = std::move(combine);
  }
  // ZeRO-1: clipping and AdamW on this rank's ranges, then the parameters all-gathered; bitwise
  // optimizer.step(lr, global_grad_norm(optimizer)) without ZeRO-1. Returns the norm.
  double optimizer_step(AdamW& optimizer, double lr);
  bool zero1() const { return zero1_ != nullptr; }
  // AdamW moment bytes this rank holds under ZeRO-1 (0 without it).
  int64_t zero1_moment_bytes() const { return zero1_ ? zero1_->moment_bytes() : 0; }
  // ZeRO-1's shard of the moments (null without ZeRO-1).
  Zero1* zero1_state() { return zero1_.get(); }
  // Mean over ranks of each loss (or, with a scale, the sum times it); sum over ranks of the
  // expert loads.
  void reduce_losses(LossBreakdown& l) { reduce_losses(l, 1.0 / double(layout_.size())); }
  void reduce_losses(LossBreakdown& l, double scale);
  void reduce_expert_loads(const std::vector<MoeLayer*>& layers);
  ParallelLayout& layout() { return layout_; }
  // Records the reductions (and ZeRO-1's parameter all-gather) as trace::kGradSync spans.
  void set_trace(TraceRecorder* rec);

 private:
  struct Bucket {
    float* ptr;
    int64_t n;
    bool expert;
    int64_t layer;  // decoder block (its layer index), or -1: embedding, final norm, head
    bool issued;
    int64_t offset;  // in the parameter arena
  };
  void issue(Bucket& b);
  // Adds what one reduction of bucket i sends (sync_bytes_).
  void count_bucket_bytes(size_t i);
  // Waits for the issued buckets, scales this rank's part of each and marks them done.
  void finish_issued(double scale, double sync_before);

  ParallelLayout& layout_;
  ParamStore& params_;
  CommStream* stream_;
  InlineCommTrace trace_;  // the reductions run without a stream
  bool armed_ = false;
  std::vector<Bucket> buckets_;  // runs of consecutive trainable weights of one group and block
  // Seconds in the reductions: added by whichever thread runs them (the communication thread
  // with a stream) while the step's thread may read it (found by ThreadSanitizer).
  std::atomic<double> sync_s_{0};
  double exposed_s_ = 0;
  int64_t sync_bytes_ = 0;  // counted on the step's thread when a bucket is issued
  std::vector<double> scratch_, expert_sums_;
  SquareSums sums_;
  std::function<double(const SquareSums&)> combine_norm_;
  std::unique_ptr<Zero1> zero1_;  // null without ZeRO-1; its run i is buckets_[i]
};

}  // namespace moet
