// The all-gather token dispatcher under mpirun: dispatch∘combine is the identity (and so is its
// backward) on even, skewed and empty-expert routings; it gives bitwise the rows, offsets,
// outputs and gradients of the all-to-all dispatcher on random routings; and training with it at
// ep = 2..world gives bitwise the losses of one expert-parallel rank (the local dispatcher).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "kernels/ops.h"
#include "model/local_dispatcher.h"
#include "model/model.h"
#include "mpi_dispatch_check.h"
#include "mpi_test_util.h"
#include "mpi_train_util.h"
#include "parallel/allgather_dispatcher.h"
#include "parallel/alltoall_dispatcher.h"
#include "parallel/data_parallel.h"
#include "train/train_step.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype == b.dtype &&
         (a.numel() == 0 || std::memcmp(a.ptr, b.ptr, a.bytes()) == 0);
}

TEST(AllGatherDispatcher, DispatchThenCombineIsTheIdentity) {
  test::check_dispatch_identity_cases(test::DispatcherKind::kAllGather);
}

// Fills t with uniform values in [lo, hi).
void fill_uniform(Tensor& t, std::mt19937& g, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(g);
}

// Random x, routing (repeats within a token allowed), gates and gradients: both dispatchers see
// the same inputs and must give the same bits everywhere.
// With `overlap`, both run their exchanges on a communication thread (split phases).
void check_same_as_alltoall(uint32_t seed, int64_t E, int64_t N, int64_t K, int64_t D,
                            bool overlap) {
  Communicator& world = test::world();
  const int64_t r = world.rank(), P = world.size();
  Arena act(4 << 20), scratch(4 << 20), act2(4 << 20), scratch2(4 << 20), io(4 << 20);
  Workspace ws_ag{act, scratch, 1, N}, ws_a2a{act2, scratch2, 1, N};
  AllGatherDispatcher ag(world, E);
  AllToAllDispatcher a2a(world, E);
  ag.plan(ws_ag, D, K);
  a2a.plan(ws_a2a, D, K);
  std::unique_ptr<CommStream> stream;
  if (overlap) stream = std::make_unique<CommStream>();
  ag.set_stream(stream.get());
  a2a.set_stream(stream.get());
  ASSERT_EQ(ag.max_expert_rows(), a2a.max_expert_rows());
  std::mt19937 g(seed * 7919u + uint32_t(r));
  Tensor x = io.alloc_f32({N, D}), idx = io.alloc_i32({N, K}), gates = io.alloc_f32({N, K});
  Tensor dy = io.alloc_f32({N, D});
  fill_uniform(x, g, -1, 1);
  fill_uniform(gates, g, 0, 1);
  fill_uniform(dy, g, -1, 1);
  // Skewed towards low experts: some experts may get nothing.
  std::uniform_int_distribution<int32_t> ue(0, int32_t(E - 1));
  for (int64_t i = 0; i < N * K; ++i) idx.i32()[i] = std::min(ue(g), ue(g));

  ag.dispatch(x, idx);
  a2a.dispatch(x, idx);
  Tensor xp = ag.expert_rows();
  ASSERT_EQ(xp.size(0), a2a.expert_rows().size(0));
  ASSERT_TRUE(same_bits(ag.expert_offsets(), a2a.expert_offsets()));
  ASSERT_TRUE(same_bits(xp, a2a.expert_rows()));
  const int64_t M = xp.size(0), ag_dispatch = ag.bytes_sent(), a2a_dispatch = a2a.bytes_sent();

  // Experts: yp = x² - x/3 (the same bits on both sides).
  Tensor yp = io.alloc_f32({ag.max_expert_rows(), D}).rows(0, M);
  for (int64_t i = 0; i < M * D; ++i) yp.f32()[i] = xp.f32()[i] * xp.f32()[i] - xp.f32()[i] / 3;
  Tensor y1 = io.alloc_f32({N, D}), y2 = io.alloc_f32({N, D});
  ag.combine(yp, gates, y1, false);
  a2a.combine(yp, gates, y2, false);
  EXPECT_TRUE(same_bits(y1, y2)) << "combine";
  // The return path moves exactly what the all-to-all's does.
  EXPECT_EQ(ag.bytes_sent() - ag_dispatch, a2a.bytes_sent() - a2a_dispatch);
  std::memcpy(y1.ptr, dy.ptr, dy.bytes());
  std::memcpy(y2.ptr, dy.ptr, dy.bytes());
  ag.combine(yp, gates, y1, true);
  a2a.combine(yp, gates, y2, true);
  EXPECT_TRUE(same_bits(y1, y2)) << "combine, accumulating";

  Tensor dyp1 = io.alloc_f32({ag.max_expert_rows(), D}).rows(0, M);
  Tensor dyp2 = io.alloc_f32({ag.max_expert_rows(), D}).rows(0, M);
  Tensor dg1 = io.alloc_f32({N, K}), dg2 = io.alloc_f32({N, K});
  ag.combine_backward(dy, yp, gates, dyp1, dg1);
  a2a.combine_backward(dy, yp, gates, dyp2, dg2);
  EXPECT_TRUE(same_bits(dyp1, dyp2)) << "combine_backward: dyp";
  EXPECT_TRUE(same_bits(dg1, dg2)) << "combine_backward: dgates";

  Tensor dxp = io.alloc_f32({ag.max_expert_rows(), D}).rows(0, M);
  for (int64_t i = 0; i < M * D; ++i) dxp.f32()[i] = dyp1.f32()[i] * 1.7f - yp.f32()[i];
  Tensor dx1 = io.alloc_f32({N, D}), dx2 = io.alloc_f32({N, D});
  std::memcpy(dx1.ptr, x.ptr, x.bytes());
  std::memcpy(dx2.ptr, x.ptr, x.bytes());
  ag.dispatch_backward(dxp, dx1);
  a2a.dispatch_backward(dxp, dx2);
  EXPECT_TRUE(same_bits(dx1, dx2)) << "dispatch_backward";
  // Besides the dispatch itself, both move the same rows.
  EXPECT_EQ(ag.bytes_sent() - ag_dispatch, a2a.bytes_sent() - a2a_dispatch);
  EXPECT_EQ(ag_dispatch, (P - 1) * N * (D * int64_t(sizeof(float)) + K * 4));
  EXPECT_EQ(ag.routing_bytes_sent(), (P - 1) * N * K * 4);
}

TEST(AllGatherDispatcher, BitwiseSameAsAllToAll) {
  const int64_t P = test::world().size();
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    check_same_as_alltoall(seed, 4 * P, 11 + seed, 1 + seed % 4, 5 + seed, seed % 2 == 0);
  }
  check_same_as_alltoall(99, P, 5, 2, 8, false);        // one expert per rank
  check_same_as_alltoall(100, 8 * P, 33, 8, 16, true);  // K > P, on a communication thread
}

// ---------------------------------------------------------------- training

using test::DispatcherKind;
using test::TrainRun;
constexpr int64_t kT = 16;

TrainRun train(int ep, DispatcherKind kind, int64_t B, int steps, bool overlap = false) {
  test::TrainSetup o;
  o.ep = ep;
  o.dispatcher = kind;
  o.B = B;
  o.steps = steps;
  o.overlap = overlap;
  return test::train_tiny(o);
}

void expect_same_run(const TrainRun& r, const TrainRun& base, const std::string& what) {
  test::expect_same_training(r, base, what, false);
}

TEST(AllGatherDispatcher, TrainingEqualsOneExpertRankBitwise) {
  const int P = test::world().size(), steps = 10;
  const int64_t B = 2, D = load_model_config(kRoot + "/configs/tiny.json").hidden_size;
  TrainRun base = train(1, DispatcherKind::kLocal, B, steps);
  for (int ep = 2; ep <= P; ep *= 2) {
    const std::string tag = "ep " + std::to_string(ep);
    TrainRun ag = train(ep, DispatcherKind::kAllGather, B, steps);
    expect_same_run(ag, base, "allgather " + tag);
    expect_same_run(train(ep, DispatcherKind::kAllGather, B, steps, true), base,
                    "allgather overlap " + tag);
    // Traffic beside the all-to-all's on the same data (rank 0's bytes per MoE layer per step).
    // The routing is the same, so combine and the backwards move the same rows in both.
    TrainRun a2a = train(ep, DispatcherKind::kAllToAll, B, steps);
    expect_same_run(a2a, base, "alltoall " + tag);
    ASSERT_GT(ag.dispatchers, 0);
    ASSERT_EQ(ag.dispatchers, a2a.dispatchers);
    const double calls = double(ag.dispatchers) * steps;
    const double gather = double((ep - 1) * B * kT * D * int64_t(sizeof(float)));
    const double routing = double(ag.routing) / calls;
    const double rest = double(ag.bytes) / calls - gather - routing;  // combine + backwards
    if (test::world().rank() == 0)
      std::printf(
          "[ tiny.json, ep %d, N %lld per rank ] bytes sent by rank 0 per MoE layer per step: "
          "allgather %.0f (dispatch %.0f + routing %.0f + combine/backward %.0f), "
          "alltoall %.0f (dispatch %.0f + combine/backward %.0f)\n",
          ep, (long long)(B * kT), double(ag.bytes) / calls, gather, routing, rest,
          double(a2a.bytes) / calls, double(a2a.bytes) / calls - rest, rest);
  }
}

}  // namespace
}  // namespace moet
