// PipelineExecutor: one pipeline rank's share of a training step — the forward and backward
// passes pipeline_schedule() lists for it, in that order (1F1B, or interleaved 1F1B with V model
// chunks), each on the Model of its chunk. Activations go to the next virtual stage and
// gradients to the previous one by non-blocking point-to-point messages, sent as soon as a pass
// ends; every receive is posted as soon as its buffer is free, and waited for only when the
// pass that reads it starts.
//
// Memory follows the schedule: chunk c keeps one Model (its activations) per micro-batch it can
// have in flight at once (slots_per_chunk), micro-batch m using slot m mod slots.
//
// With spec.ep_overlap (--a2a-overlap under --pp, Megatron's combined 1F1B) the schedule has
// one more warm-up forward and each steady-state forward runs combined with the next backward,
// stage by stage in turn, each one's expert all-to-alls under the other's compute.
//
// Virtual stage k = c·P + r (rank r, chunk c); stage 0 holds the embedding, stage V·P − 1 the
// loss and the MTP modules, whose embedding gradients travel back to stage 0 (ModelPart).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace moet {

class PipelineExecutor {
 public:
  // pp: the ranks of this pipeline, in stage order (its rank is this rank's stage).
  // chunks[c][s]: chunk c's model for slot s, slots_per_chunk(spec, rank)[c] of them.
  PipelineExecutor(Communicator& pp, const PipelineScheduleSpec& spec,
                   std::vector<std::vector<Model*>> chunks);
  // The most micro-batches chunk c of `rank` holds in flight during a step.
  static std::vector<int64_t> slots_per_chunk(const PipelineScheduleSpec& spec, int64_t rank);

  // Runs the step's passes: micro_batch(m) gives micro-batch m's tokens (every stage reads
  // them: the first embeds them, the last predicts them). grad_scale multiplies every gradient
  // (1/M for a mean). last_backward_hook(layer): a decoder block's gradients are final (its
  // last micro-batch's backward is done). Returns the sum over micro-batches of the losses
  // this rank computed (its MoE layers' balance and z losses; the LM and MTP losses on the last
  // stage), each times grad_scale.
  LossBreakdown run_step(const std::function<const int32_t*(int64_t)>& micro_batch,
                         double grad_scale);
  void set_final_gradient_hook(std::function<void(int64_t layer)> hook);
  // --delay-wgrad-compute: in a combined pass, each backward stage runs its input gradients,
  // then (after the forward's stage) its weight gradients, while the exchange the stage started
  // travels. The same arithmetic in the same order.
  void set_delay_weight_gradients(bool on) { delay_wgrad_ = on; }

  // --deterministic: `enter` runs ahead of every pass that writes (chunk, micro-batch)'s
  // parameter gradients (the loss chunk's forward, whose LM heads take their gradient there; a
  // backward, its input-gradient half I, its weight-gradient half W), `done` after the pass that
  // completes them (B or W), and `forward_done` after each forward with its model and losses.
  // Between enter and done of one micro-batch, a pass of another may enter the same chunk (a
  // zero-bubble schedule runs other micro-batches' I between an I and its W; a loss chunk with
  // more than one slot runs a forward between another's forward and backward): the hooks keep
  // each micro-batch's partial gradients apart. A combined F&B pair whose forward is on the loss
  // chunk has its backward on another chunk.
  struct GradientHooks {
    std::function<void(int64_t chunk, int64_t microbatch)> enter, done;
    std::function<void(int64_t chunk, int64_t microbatch, Model& m, const LossBreakdown& l)>
        forward_done;
  };
  void set_gradient_hooks(GradientHooks hooks);
  // The chunk's model for slot s (the same part, the same parameters, its own activations).
  Model& chunk_model(int64_t chunk, int64_t s = 0) {
    return *slots_[size_t(chunk)][size_t(s)].model;
  }
  int64_t chunk_slots(int64_t chunk) const { return int64_t(slots_[size_t(chunk)].size()); }
  int64_t chunks() const { return V_; }

  // Forward only (evaluation) of n micro-batches: the sum of their LM losses on the last stage,
  // 0 elsewhere.
  double forward_only(const std::function<const int32_t*(int64_t)>& micro_batch, int64_t n);

  // After the optimizer step: the first stage's embedding values go to the last stage's replica
  // (its MTP modules read them), when the model has MTP modules.
  void sync_embedding_replica(ParamStore& params);

  int64_t stage() const { return rank_; }
  bool is_first() const { return rank_ == 0; }
  bool is_last() const { return rank_ == P_ - 1; }
  const PipelineScheduleSpec& spec() const { return spec_; }
  // The last run_step's times on this rank: the whole step's passes, the part spent waiting for
  // other stages' activations and gradients, and each chunk's forward and backward compute
  // (summed over micro-batches, waits excluded; passes run combined count as backward).
  struct StepTimes {
    double run_s = 0, wait_s = 0;
    std::vector<double> forward_s, backward_s;  // per chunk
    // The same compute by kind of pass, over all chunks: seconds and count of the forwards,
    // backwards, input-gradient halves (I), weight-gradient halves (W) and overlapped pairs.
    struct Kind {
      double s = 0;
      int64_t n = 0;
    };
    Kind f, b, i, w, pair;
    // Bytes this rank sent to other stages: activations, their gradients, the MTP modules'
    // gradients and the embedding replica's values (sync_embedding_replica counts into the step
    // whose run_step came before it). Not the V's hand-offs between a rank's own chunks.
    int64_t sent_bytes = 0;
  };
  const StepTimes& last_step_times() const { return times_; }
  // Forward/backward pairs this rank runs combined per step (0 without the EP overlap).
  int64_t combined_pairs() const { return combined_pairs_; }
  // Bytes of activations this rank holds (every slot of every chunk).
  int64_t activation_bytes() const;
  // Records each pass as a trace::kPass span ("F 3.0": forward of micro-batch 3 on chunk 0;
  // "I", "W", "B"; "F 5.0 & B 1.1" an overlapped pair) and the waits for messages as
  // trace::kPipeline spans, on the "compute" lane, and each send's bytes as in flight from the
  // send until its wait.
  void set_trace(TraceRecorder* rec);

 private:
  struct Slot {
    Model* model = nullptr;
    std::vector<Communicator::Message> sends;  // to wait for before the slot is reused
    int64_t send_bytes = 0;                    // their bytes (the trace's bytes in flight)
  };
  // Sends `bytes` from `data` to `peer` from slot s (waited for by wait_sends).
  void send(Slot& s, const void* data, int64_t bytes, int peer, int tag);
  int64_t virtual_stage(int64_t chunk) const { return pipeline_stage(spec_, rank_, chunk); }
  int rank_of(int64_t stage) const { return int(pipeline_place(spec_, stage).rank); }
  Slot& slot(int64_t chunk, int64_t microbatch);
  int tag(int64_t microbatch, int64_t vstage, int kind) const;
  void wait_sends(Slot& s);
  void post_input_receive(int64_t chunk, int64_t microbatch);
  void post_gradient_receives(int64_t chunk, int64_t microbatch);
  // A pass in halves (begin waits for its input, end sends its output and posts the receives
  // the slot needs next), so that two passes can run combined. losses: null for forward only.
  Model& begin_forward(int64_t chunk, int64_t microbatch, const int32_t* tokens, double grad_scale,
                       bool training);
  void end_forward(int64_t chunk, int64_t microbatch, bool training, double grad_scale,
                   LossBreakdown* losses);
  Model& begin_backward(int64_t chunk, int64_t microbatch, double grad_scale);
  void end_backward(int64_t chunk, int64_t microbatch);
  void forward(int64_t chunk, int64_t microbatch, const int32_t* tokens, double grad_scale,
               LossBreakdown* losses);
  // input_only: I of the zero-bubble schedules (the weight gradients kept for weight_pass).
  void backward(int64_t chunk, int64_t microbatch, double grad_scale, bool input_only = false);
  void weight_pass(int64_t chunk, int64_t microbatch);
  bool is_loss_chunk(int64_t chunk) const { return virtual_stage(chunk) == S_ - 1; }
  void enter_gradients(int64_t chunk, int64_t microbatch);  // GradientHooks::enter, when set
  void gradients_done(int64_t chunk, int64_t microbatch);
  void combined(const PipelinePass& f, const PipelinePass& b, const int32_t* tokens,
                double grad_scale, LossBreakdown* losses);

  Communicator& pp_;
  PipelineScheduleSpec spec_;
  int64_t P_, V_, S_, rank_, mtp_;
  std::vector<std::vector<Slot>> slots_;  // [chunk][slot]
  std::vector<PipelinePass> passes_;
  std::vector<bool> combine_;  // passes_[i] runs combined with passes_[i + 1]
  int64_t combined_pairs_ = 0;
  bool delay_wgrad_ = false;
  // receives posted and not yet waited for, per (chunk, micro-batch mod slots)
  std::vector<std::vector<Communicator::Message>> input_recv_, grad_recv_;
  std::vector<std::vector<std::vector<Communicator::Message>>> mtp_recv_;
  std::function<void(int64_t)> final_hook_;
  GradientHooks grad_hooks_;
  int64_t current_microbatch_ = 0;
  double eval_loss_ = 0;
  StepTimes times_;
  void wait_receive(Communicator::Message m, const char* what);
  TraceRecorder* trace_ = nullptr;
  int trace_lane_ = 0;
  std::vector<const char*> pass_names_;  // each pass's trace span name (interned)
};

}  // namespace moet
