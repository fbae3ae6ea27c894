#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/trace.h"

namespace moet {

namespace {
constexpr int kActivation = 0, kGradient = 1, kMtpGradient = 2;  // + module index
}  // namespace

std::vector<int64_t> PipelineExecutor::slots_per_chunk(const PipelineScheduleSpec& spec,
                                                       int64_t rank) {
  std::vector<int64_t> in_flight(size_t(spec.chunks), 0), most(size_t(spec.chunks), 0);
  for (const PipelinePass& p : pipeline_schedule(spec, rank)) {
    int64_t& n = in_flight[size_t(p.chunk)];
    // a slot is free after its input gradient: the W pass reads what the backward kept
    n += p.forward() ? 1 : p.input_grad() ? -1 : 0;
    most[size_t(p.chunk)] = std::max(most[size_t(p.chunk)], n);
  }
  return most;
}

PipelineExecutor::PipelineExecutor(Communicator& pp, const PipelineScheduleSpec& spec,
                                   std::vector<std::vector<Model*>> chunks)
    : pp_(pp),
      spec_(spec),
      P_(spec.stages),
      V_(spec.chunks),
      S_(spec.stages * spec.chunks),
      rank_(pp.rank()) {
  check_pipeline_schedule(spec_);
  MOET_ASSERT(pp.size() == P_ && int64_t(chunks.size()) == V_);
  passes_ = pipeline_schedule(spec_, rank_);
  // With the EP overlap, the steady state's forward and backward of other micro-batches run
  // combined. Only the steady state's pairs: where the warm-up holds every forward, the last
  // forward and the first backward after it would wait on each other across the stages (the
  // backward's gradient needs the next stage to have run a forward whose input this forward sends
  // only when it ends).
  combine_.assign(passes_.size(), false);
  for (size_t i = 0; i < passes_.size(); ++i)  // DualPipeV names its overlapped pairs
    if (passes_[i].overlapped) combine_[i] = true, ++combined_pairs_;
  const size_t warmup = size_t(pipeline_warmup_passes(spec_, rank_));
  const bool combined_1f1b = spec_.ep_overlap && !is_v_schedule(spec_.kind);
  for (size_t i = warmup; combined_1f1b && i + 1 < passes_.size(); i += 2) {
    const PipelinePass &f = passes_[i], &b = passes_[i + 1];
    if (!f.forward() || b.forward()) break;  // the cool-down: backwards only
    if (b.microbatch == f.microbatch && b.chunk == f.chunk) continue;
    combine_[i] = true;
    ++combined_pairs_;
  }
  const std::vector<int64_t> slots = slots_per_chunk(spec_, rank_);
  mtp_ = chunks[0][0]->config().num_nextn_predict_layers;  // the same on every stage (tags)
  for (int64_t c = 0; c < V_; ++c) {
    MOET_ASSERT(int64_t(chunks[size_t(c)].size()) == slots[size_t(c)]);
    std::vector<Slot>& row = slots_.emplace_back();
    for (Model* m : chunks[size_t(c)]) {
      row.push_back(Slot{m, {}});
      m->set_backward_hook([this](int64_t layer) {
        if (final_hook_ && current_microbatch_ == spec_.microbatches - 1) final_hook_(layer);
      });
    }
    input_recv_.emplace_back(row.size(), -1);
    grad_recv_.emplace_back(row.size(), -1);
    mtp_recv_.emplace_back(row.size(), std::vector<Communicator::Message>(size_t(mtp_), -1));
  }
}

void PipelineExecutor::set_final_gradient_hook(std::function<void(int64_t)> hook) {
  final_hook_ = std::move(hook);
}

void PipelineExecutor::set_gradient_hooks(GradientHooks hooks) {
  for (size_t i = 0; i < passes_.size(); ++i)
    MOET_CHECK(!combine_[i] || !is_loss_chunk(passes_[i].chunk) ||
                   passes_[i].chunk != passes_[i + 1].chunk,
               "--deterministic under --pp: a combined pass runs the loss chunk's forward with "
               "its own backward (not with --a2a-overlap)");
  grad_hooks_ = std::move(hooks);
}

void PipelineExecutor::enter_gradients(int64_t chunk, int64_t microbatch) {
  if (grad_hooks_.enter) grad_hooks_.enter(chunk, microbatch);
}

void PipelineExecutor::gradients_done(int64_t chunk, int64_t microbatch) {
  if (grad_hooks_.done) grad_hooks_.done(chunk, microbatch);
}

int64_t PipelineExecutor::activation_bytes() const {
  int64_t total = 0;
  for (const auto& row : slots_)
    for (const Slot& s : row) total += int64_t(s.model->activation_bytes());
  return total;
}

PipelineExecutor::Slot& PipelineExecutor::slot(int64_t chunk, int64_t microbatch) {
  std::vector<Slot>& row = slots_[size_t(chunk)];
  return row[size_t(microbatch % int64_t(row.size()))];
}

int PipelineExecutor::tag(int64_t microbatch, int64_t vstage, int kind) const {
  return int((microbatch * S_ + vstage) * (kMtpGradient + mtp_) + kind);
}

void PipelineExecutor::set_trace(TraceRecorder* rec) {
  trace_ = rec;
  pass_names_.clear();
  if (!rec) return;
  trace_lane_ = rec->lane(trace::kComputeLane);
  // "F 3.0": micro-batch 3 on chunk 0; "F 5.0 & B 1.1": an overlapped pair
  auto name = [](const PipelinePass& p) {
    const char* op = p.op == PassOp::kForward      ? "F"
                     : p.op == PassOp::kInputGrad  ? "I"
                     : p.op == PassOp::kWeightGrad ? "W"
                                                   : "B";
    return std::string(op) + " " + std::to_string(p.microbatch) + "." + std::to_string(p.chunk);
  };
  for (size_t i = 0; i < passes_.size(); ++i)
    pass_names_.push_back(rec->intern(combine_[i] ? name(passes_[i]) + " & " + name(passes_[i + 1])
                                                  : name(passes_[i])));
}

void PipelineExecutor::wait_receive(Communicator::Message m, const char* what) {
  TraceRecorder::Span span(trace_, trace_lane_, what, trace::kPipeline);
  const auto t0 = std::chrono::steady_clock::now();
  pp_.wait(m);
  times_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void PipelineExecutor::send(Slot& s, const void* data, int64_t bytes, int peer, int tag) {
  if (peer == int(rank_)) {  // the V's turn: a hand-off within the rank, no communication
    s.sends.push_back(pp_.isend(data, bytes, peer, tag));
    return;
  }
  if (trace_) trace_->add_in_flight(bytes);
  s.send_bytes += bytes;
  times_.sent_bytes += bytes;
  s.sends.push_back(pp_.isend(data, bytes, peer, tag));
}

void PipelineExecutor::wait_sends(Slot& s) {
  if (s.sends.empty()) return;
  {
    TraceRecorder::Span span(trace_, trace_lane_, "wait for sends", trace::kPipeline);
    for (Communicator::Message m : s.sends) pp_.wait(m);
  }
  if (trace_) trace_->add_in_flight(-s.send_bytes);
  s.sends.clear();
  s.send_bytes = 0;
}

void PipelineExecutor::post_input_receive(int64_t chunk, int64_t microbatch) {
  const int64_t k = virtual_stage(chunk);
  if (k == 0 || microbatch >= spec_.microbatches) return;
  Slot& s = slot(chunk, microbatch);
  wait_sends(s);
  Tensor& in = s.model->input();
  const size_t i = size_t(microbatch % int64_t(slots_[size_t(chunk)].size()));
  input_recv_[size_t(chunk)][i] =
      pp_.irecv(in.ptr, int64_t(in.bytes()), rank_of(k - 1), tag(microbatch, k, kActivation));
}

void PipelineExecutor::post_gradient_receives(int64_t chunk, int64_t microbatch) {
  const int64_t k = virtual_stage(chunk);
  Slot& s = slot(chunk, microbatch);
  const size_t i = size_t(microbatch % int64_t(slots_[size_t(chunk)].size()));
  if (k < S_ - 1) {
    Tensor& g = s.model->output_grad();
    grad_recv_[size_t(chunk)][i] =
        pp_.irecv(g.ptr, int64_t(g.bytes()), rank_of(k + 1), tag(microbatch, k, kGradient));
  }
  if (k == 0)
    for (int64_t j = 0; j < mtp_; ++j) {
      Tensor& g = s.model->mtp_embedding_grads()[size_t(j)];
      mtp_recv_[size_t(chunk)][i][size_t(j)] = pp_.irecv(g.ptr, int64_t(g.bytes()), rank_of(S_ - 1),
                                                         tag(microbatch, 0, kMtpGradient + int(j)));
    }
}

Model& PipelineExecutor::begin_forward(int64_t chunk, int64_t microbatch, const int32_t* tokens,
                                       double grad_scale, bool training) {
  const int64_t k = virtual_stage(chunk);
  // forward only: slot 0, one micro-batch at a time
  const size_t i =
      training ? size_t(microbatch % int64_t(slots_[size_t(chunk)].size())) : size_t(0);
  Slot& s = slots_[size_t(chunk)][i];
  Model& m = *s.model;
  wait_sends(s);
  m.forward_begin(tokens, grad_scale);
  if (k > 0) {
    if (training) {
      wait_receive(input_recv_[size_t(chunk)][i], "wait for activations");
    } else {  // forward only: nothing was posted ahead
      Tensor& in = m.input();
      TraceRecorder::Span span(trace_, trace_lane_, "wait for activations", trace::kPipeline);
      pp_.wait(
          pp_.irecv(in.ptr, int64_t(in.bytes()), rank_of(k - 1), tag(microbatch, k, kActivation)));
    }
  }
  return m;
}

void PipelineExecutor::end_forward(int64_t chunk, int64_t microbatch, bool training,
                                   double grad_scale, LossBreakdown* losses) {
  const int64_t k = virtual_stage(chunk);
  Slot& s = training ? slot(chunk, microbatch) : slots_[size_t(chunk)][0];
  Model& m = *s.model;
  const LossBreakdown l = m.forward_end();
  if (training && grad_hooks_.forward_done) grad_hooks_.forward_done(chunk, microbatch, m, l);
  if (training) {
    losses->loss += l.loss * grad_scale;
    losses->lm_loss += l.lm_loss * grad_scale;
    losses->mtp_loss += l.mtp_loss * grad_scale;
    losses->balance_loss += l.balance_loss * grad_scale;
    losses->z_loss += l.z_loss * grad_scale;
  } else if (k == S_ - 1) {
    eval_loss_ += l.lm_loss;
  }
  if (k < S_ - 1) {
    const Tensor& out = m.output();
    send(s, out.ptr, int64_t(out.bytes()), rank_of(k + 1), tag(microbatch, k + 1, kActivation));
  }
  if (training) post_gradient_receives(chunk, microbatch);
}

void PipelineExecutor::forward(int64_t chunk, int64_t microbatch, const int32_t* tokens,
                               double grad_scale, LossBreakdown* losses) {
  const bool training = losses != nullptr;
  if (training && is_loss_chunk(chunk)) enter_gradients(chunk, microbatch);
  Model& m = begin_forward(chunk, microbatch, tokens, grad_scale, training);
  for (int64_t l = 0; l < m.num_layers(); ++l)
    for (MoeStage st : kMoeStages) {
      m.forward_stage(l, st);
      pp_.progress();  // the messages in flight move between layers, not only at waits
    }
  end_forward(chunk, microbatch, training, grad_scale, losses);
}

Model& PipelineExecutor::begin_backward(int64_t chunk, int64_t microbatch, double grad_scale) {
  const int64_t k = virtual_stage(chunk);
  Model& m = *slot(chunk, microbatch).model;
  const size_t i = size_t(microbatch % int64_t(slots_[size_t(chunk)].size()));
  if (k < S_ - 1) wait_receive(grad_recv_[size_t(chunk)][i], "wait for gradients");
  m.backward_begin(grad_scale);
  return m;
}

void PipelineExecutor::end_backward(int64_t chunk, int64_t microbatch) {
  const int64_t k = virtual_stage(chunk);
  Slot& s = slot(chunk, microbatch);
  Model& m = *s.model;
  const size_t i = size_t(microbatch % int64_t(slots_[size_t(chunk)].size()));
  if (k == 0)
    for (Communicator::Message r : mtp_recv_[size_t(chunk)][i])
      wait_receive(r, "wait for MTP embedding gradients");
  m.backward_end();
  if (k > 0) {
    const Tensor& g = m.input_grad();
    send(s, g.ptr, int64_t(g.bytes()), rank_of(k - 1), tag(microbatch, k - 1, kGradient));
  }
  if (k == S_ - 1)
    for (int64_t j = 0; j < mtp_; ++j) {
      const Tensor& g = m.mtp_embedding_grads()[size_t(j)];
      send(s, g.ptr, int64_t(g.bytes()), rank_of(0), tag(microbatch, 0, kMtpGradient + int(j)));
    }
  // The slot is free: its next micro-batch's activations may arrive.
  post_input_receive(chunk, microbatch + int64_t(slots_[size_t(chunk)].size()));
}

void PipelineExecutor::backward(int64_t chunk, int64_t microbatch, double grad_scale,
                                bool input_only) {
  current_microbatch_ = microbatch;
  enter_gradients(chunk, microbatch);
  Model& m = *slot(chunk, microbatch).model;
  m.defer_weight_gradients(input_only);
  begin_backward(chunk, microbatch, grad_scale);
  for (int64_t l = m.num_layers(); l-- > 0;)
    for (MoeStage st : kMoeStages) {
      m.backward_stage(l, st);
      pp_.progress();
    }
  m.defer_weight_gradients(false);
  end_backward(chunk, microbatch);
  if (!input_only) gradients_done(chunk, microbatch);
}

// W: the weight gradients the micro-batch's I kept on its slot's model (the oldest kept there:
// a chunk's W passes run in micro-batch order), then the backward hooks they held back.
void PipelineExecutor::weight_pass(int64_t chunk, int64_t microbatch) {
  current_microbatch_ = microbatch;
  enter_gradients(chunk, microbatch);
  slot(chunk, microbatch).model->weight_gradients();
  gradients_done(chunk, microbatch);
}

// Combined 1F1B (Megatron's EP overlap): a forward and a backward of two other micro-batches run
// stage by stage in turn, so each one's expert exchanges (started at the end of a stage, waited
// for at the start of its next) travel under the other's compute. The arithmetic of each is
// unchanged: a forward adds no parameter gradient except the LM head's, which only forwards add,
// in micro-batch order as before.
void PipelineExecutor::combined(const PipelinePass& f, const PipelinePass& b, const int32_t* tokens,
                                double grad_scale, LossBreakdown* losses) {
  current_microbatch_ = b.microbatch;
  if (is_loss_chunk(f.chunk)) enter_gradients(f.chunk, f.microbatch);
  enter_gradients(b.chunk, b.microbatch);
  Model& mf = begin_forward(f.chunk, f.microbatch, tokens, grad_scale, true);
  Model& mb = begin_backward(b.chunk, b.microbatch, grad_scale);
  const int64_t stages = int64_t(kMoeStages.size());
  const int64_t nf = mf.num_layers() * stages, nb = mb.num_layers() * stages;
  for (int64_t i = 0; i < std::max(nf, nb); ++i) {
    const MoeStage st = kMoeStages[size_t(i % stages)];
    if (i < nf) mf.forward_stage(i / stages, st);
    if (i < nb) {  // with the delay: input gradients now, the exchange starts at the stage's end
      mb.defer_weight_gradients(delay_wgrad_);
      mb.backward_stage(mb.num_layers() - 1 - i / stages, st);
      mb.defer_weight_gradients(false);
    }
    pp_.progress();
    if (i < nb && delay_wgrad_) {  // under the exchanges in flight
      // weight_gradients() runs the oldest kept backward: it must be this stage's (a schedule
      // that left an I pass's W pending on this slot would need the newest run instead)
      MOET_CHECK(mb.deferred_backwards() == 1, "--delay-wgrad-compute: chunk ", b.chunk,
                 " micro-batch ", b.microbatch, " still keeps ", mb.deferred_backwards() - 1,
                 " earlier backward's weight gradients; this schedule cannot delay them");
      mb.weight_gradients();
    }
  }
  end_forward(f.chunk, f.microbatch, true, grad_scale, losses);
  end_backward(b.chunk, b.microbatch);
  if (b.op == PassOp::kBackward) gradients_done(b.chunk, b.microbatch);
}

void PipelineExecutor::sync_embedding_replica(ParamStore& params) {
  // the V's rank 0 holds both: its MTP modules read the embedding itself
  if (mtp_ == 0 || rank_of(0) == rank_of(S_ - 1) || !(is_first() || is_last())) return;
  const NamedSlice& e = params.named("model.embed_tokens.weight");
  Tensor v = e.weight->value;
  MOET_ASSERT(e.weight->replica == is_last());
  TraceRecorder::Span span(trace_, trace_lane_, "embedding replica", trace::kPipeline);
  const int64_t sent = is_first() ? int64_t(v.bytes()) : 0;
  times_.sent_bytes += sent;
  if (trace_) trace_->add_in_flight(sent);
  if (is_first())
    pp_.wait(pp_.isend(v.ptr, int64_t(v.bytes()), int(P_ - 1), 0));
  else
    pp_.wait(pp_.irecv(v.ptr, int64_t(v.bytes()), 0, 0));
  if (trace_) trace_->add_in_flight(-sent);
}

LossBreakdown PipelineExecutor::run_step(const std::function<const int32_t*(int64_t)>& micro_batch,
                                         double grad_scale) {
  for (int64_t c = 0; c < V_; ++c)
    for (int64_t m = 0; m < int64_t(slots_[size_t(c)].size()); ++m) post_input_receive(c, m);
  LossBreakdown losses;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  times_.wait_s = 0;
  times_.sent_bytes = 0;
  times_.forward_s.assign(size_t(V_), 0.0);
  times_.backward_s.assign(size_t(V_), 0.0);
  times_.f = times_.b = times_.i = times_.w = times_.pair = {};
  const clock::time_point start = clock::now();
  for (size_t i = 0; i < passes_.size(); ++i) {
    const PipelinePass& p = passes_[i];
    const clock::time_point t0 = clock::now();
    const double waited = times_.wait_s;
    const bool both = combine_[i];
    TraceRecorder::Span span(trace_, trace_lane_, trace_ ? pass_names_[i] : nullptr, trace::kPass);
    if (both) {
      combined(p, passes_[i + 1], micro_batch(p.microbatch), grad_scale, &losses);
      ++i;
    } else if (p.forward()) {
      forward(p.chunk, p.microbatch, micro_batch(p.microbatch), grad_scale, &losses);
    } else if (p.op == PassOp::kWeightGrad) {
      weight_pass(p.chunk, p.microbatch);
    } else {
      backward(p.chunk, p.microbatch, grad_scale, p.op == PassOp::kInputGrad);
    }
    const double busy = seconds(t0, clock::now()) - (times_.wait_s - waited);
    (p.forward() && !both ? times_.forward_s : times_.backward_s)[size_t(p.chunk)] += busy;
    StepTimes::Kind& kind = both                          ? times_.pair
                            : p.forward()                 ? times_.f
                            : p.op == PassOp::kInputGrad  ? times_.i
                            : p.op == PassOp::kWeightGrad ? times_.w
                                                          : times_.b;
    kind.s += busy;
    ++kind.n;
  }
  times_.run_s = seconds(start, clock::now());
  for (auto& row : slots_)
    for (Slot& s : row) wait_sends(s);
  return losses;
}

double PipelineExecutor::forward_only(const std::function<const int32_t*(int64_t)>& micro_batch,
                                      int64_t n) {
  eval_loss_ = 0;
  for (int64_t mb = 0; mb < n; ++mb)
    for (int64_t c = 0; c < V_; ++c) forward(c, mb, micro_batch(mb), 0.0, nullptr);
  for (auto& row : slots_)
    for (Slot& s : row) wait_sends(s);
  return eval_loss_;
}

}  // namespace moet
