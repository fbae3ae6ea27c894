// Shared by the MPI tests that train: configs/tiny.json on this rank's share of a global batch of
// world × B sequences (mock data), experts over groups of `ep` ranks, with the options the
// layout-invariance tests compare (dispatcher, communication thread, --a2a-overlap, ZeRO-1).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "model/local_dispatcher.h"
#include "model/model.h"
#include "mpi_test_util.h"
#include "parallel/allgather_dispatcher.h"
#include "parallel/alltoall_dispatcher.h"
#include "parallel/data_parallel.h"
#include "train/train_step.h"

namespace moet::test {

enum class DispatcherKind { kAuto, kLocal, kAllToAll, kAllGather };  // auto: local iff ep == 1
enum class Split { kNone, kInterleaved, kLaneByLane };               // --a2a-overlap lanes

struct TrainSetup {
  int ep = 1;
  int64_t B = 2;
  int64_t grad_accum = 1;
  int steps = 10;
  DispatcherKind dispatcher = DispatcherKind::kAuto;
  bool overlap = false;  // communication thread
  Split split = Split::kNone;
  bool zero1 = false;
  double grad_clip = 1.0;
  bool deterministic = false;  // --deterministic: one sequence at a time, tree-ordered sums
  PrecisionPolicy precision;   // --precision (tiny.json: layers 0 and 2 stay bf16 under FP8)
  MomentDtypes moments;        // --exp-avg-dtype, --exp-avg-sq-dtype
};

struct TrainRun {
  std::vector<double> losses, norms;
  std::vector<float> params;  // after the last step
  // The same by Hugging Face name (each expert apart): an expert-parallel rank holds its own
  // experts only, so ranks compare with one process name by name.
  std::map<std::string, std::vector<float>> named;
  bool has_moments = false;        // the optimizer holds full moments (not ZeRO-1)
  int64_t moment_bytes = 0;        // AdamW moments on this rank
  int64_t dispatchers = 0;         // expert-exchange dispatchers (MoE layers × lanes)
  int64_t bytes = 0, routing = 0;  // this rank's bytes_sent() over the run, its routing part
  int64_t grad_sync_bytes = 0;     // DataParallel::take_sync_bytes() over the run
  int64_t dense_numel = 0, expert_numel = 0;  // trainable elements this rank holds
};

// The parameters after the last step, whole and by name.
inline void keep_parameters(const ParamStore& ps, TrainRun& out) {
  Tensor v = ps.all_values();
  out.params.assign(v.f32(), v.f32() + v.numel());
  for (const auto& [name, slice] : ps.names()) {
    const Tensor t = slice.value();
    out.named[name].assign(t.f32(), t.f32() + t.numel());
  }
}

inline TrainRun train_tiny(const TrainSetup& o) {
  Communicator& world = test::world();
  ParallelLayout layout = make_parallel_layout(world, o.ep);
  std::unique_ptr<CommStream> stream;
  if (o.overlap) stream = std::make_unique<CommStream>();
  ModelConfig cfg = load_model_config(std::string(MOET_SOURCE_DIR) + "/configs/tiny.json");
  const int64_t T = 16;
  DispatcherKind kind = o.dispatcher;
  if (kind == DispatcherKind::kAuto)
    kind = o.ep == 1 ? DispatcherKind::kLocal : DispatcherKind::kAllToAll;
  std::vector<ExpertExchangeDispatcher*> exchanges;
  DispatcherFactory factory = [&](int64_t E) -> std::unique_ptr<TokenDispatcher> {
    if (kind == DispatcherKind::kLocal) return std::make_unique<LocalDispatcher>(E);
    std::unique_ptr<ExpertExchangeDispatcher> d;
    if (kind == DispatcherKind::kAllGather)
      d = std::make_unique<AllGatherDispatcher>(*layout.ep_group, E);
    else
      d = std::make_unique<AllToAllDispatcher>(*layout.ep_group, E);
    d->set_stream(stream.get());
    exchanges.push_back(d.get());
    return d;
  };
  const LossWeights lw{0.3, 1e-2, 1e-3};
  const int64_t lane_b = o.deterministic ? 1 : o.split == Split::kNone ? o.B : o.B / 2;
  Model m(cfg, {.micro_batch = lane_b,
                .seq_len = T,
                .loss_weights = lw,
                .dispatchers = factory,
                .precision = o.precision});
  m.init_parameters(7);
  std::unique_ptr<Model> lane2;
  if (o.split != Split::kNone)
    lane2 = std::make_unique<Model>(cfg, ModelSpec{.micro_batch = lane_b,
                                                   .seq_len = T,
                                                   .loss_weights = lw,
                                                   .dispatchers = factory,
                                                   .shared = &m});
  // As in the trainer: with overlap, the gradient reductions share the dispatchers' stream.
  DataParallel dp(layout, m.params(), stream.get(), o.zero1, o.moments);
  (lane2 ? *lane2 : m).set_backward_hook([&](int64_t layer) { dp.on_layer_done(layer); });
  LrSchedule sched;
  sched.max_lr = 3e-3;
  sched.min_lr = 3e-4;
  sched.warmup = 2;
  sched.total = o.steps;
  AdamWConfig oc;
  oc.grad_clip = o.grad_clip;
  oc.moments = o.moments;
  StepPlan plan;  // the modes as ParallelRun::step_plan picks them
  plan.dp = &dp;
  if (lane2) {
    plan.accumulation = two_lane_accumulation(m, *lane2, o.split == Split::kInterleaved, &dp);
    plan.merges = second_lane_merges(m, *lane2);
  } else if (o.deterministic) {
    plan.accumulation = deterministic_accumulation(m, o.B, &dp);
  }
  StepRunner runner(m, oc, sched, 1e-2, std::move(plan));
  MockDataset data(cfg.vocab_size, 3);
  const int64_t per = o.B * (T + 1);
  std::vector<int32_t> tok(o.grad_accum * per);
  TrainRun out;
  for (int s = 0; s < o.steps; ++s) {
    for (int64_t a = 0; a < o.grad_accum; ++a)
      data.fill_sequences(s, a, world.rank() * o.B, o.B, T, tok.data() + a * per);
    StepResult r = runner.run(s, o.grad_accum, [&](int64_t a) { return tok.data() + a * per; });
    out.losses.push_back(r.losses.loss);
    out.norms.push_back(r.grad_norm);
    out.grad_sync_bytes += dp.take_sync_bytes();
  }
  for (const Weight& w : m.params().weights())
    if (w.trainable) (w.expert ? out.expert_numel : out.dense_numel) += w.value.numel();
  keep_parameters(m.params(), out);
  out.has_moments = runner.optimizer().has_moments();
  out.moment_bytes = o.zero1 ? dp.zero1_moment_bytes() : runner.optimizer().moment_bytes();
  for (ExpertExchangeDispatcher* d : exchanges) {
    out.bytes += d->bytes_sent();
    out.routing += d->routing_bytes_sent();
  }
  out.dispatchers = int64_t(exchanges.size());
  return out;
}

// Losses and gradient norms (and, with params, every parameter) bit for bit. Parameters are
// compared by name, every one `a` holds (a's experts may be a shard of b's), and as a whole
// where both hold the same.
inline void expect_same_training(const TrainRun& a, const TrainRun& b, const std::string& what,
                                 bool params) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_EQ(a.losses[s], b.losses[s]) << what << " step " << s;
    EXPECT_EQ(a.norms[s], b.norms[s]) << what << " step " << s;
  }
  if (!params) return;
  ASSERT_FALSE(a.named.empty()) << what;
  for (const auto& [name, v] : a.named) {
    auto it = b.named.find(name);
    ASSERT_TRUE(it != b.named.end()) << what << ": " << name << " missing";
    ASSERT_EQ(v.size(), it->second.size()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)), 0)
        << what << ": " << name << " differs";
  }
  if (a.params.size() == b.params.size()) {
    EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)), 0)
        << what << ": parameters differ";
  }
}

}  // namespace moet::test
