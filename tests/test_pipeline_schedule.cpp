// Pipeline schedules (src/parallel/pipeline_schedule.h) against Megatron-Core's ordering: the
// schedule table's documented examples, warm-up counts, every pass exactly once in dependency
// order, no deadlock over a sweep of layouts, the bubble (P−1)/(V·M) and the in-flight
// micro-batches that set activation memory, and one-line refusals of what Megatron refuses.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace moet {
namespace {

std::vector<std::pair<int64_t, int64_t>> forwards(const std::vector<PipelinePass>& l) {
  std::vector<std::pair<int64_t, int64_t>> f;
  for (const PipelinePass& p : l)
    if (p.forward) f.emplace_back(p.microbatch, p.chunk);
  return f;
}

TEST(PipelineSchedule, InterleavedForwardOrderIsMegatronsTable) {
  // Megatron's docstring: PP2, N3, M5, VP2 -> micro-batch 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1
  // 0 0 1 1 (the last group takes what is left).
  PipelineScheduleSpec s{2, 2, 5, 3};
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                                         {2, 1}, {3, 0}, {4, 0}, {3, 1}, {4, 1}};
  for (int64_t r = 0; r < 2; ++r) EXPECT_EQ(forwards(pipeline_schedule(s, r)), want) << r;
  // Megatron-Core's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py): rank 0,
  // P=2, V=2 (N = P): forwards 0 1 0 1 2 3 2 3.
  const auto f = forwards(pipeline_schedule({2, 2, 4}, 0));
  std::vector<int64_t> mb;
  for (auto [m, c] : f) mb.push_back(m);
  EXPECT_EQ(mb, (std::vector<int64_t>{0, 1, 0, 1, 2, 3, 2, 3}));
}

TEST(PipelineSchedule, WarmupCounts) {
  // 1F1B: P - r - 1 forwards before the first backward, at most M.
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(pipeline_warmup_passes({4, 1, 8}, r), 3 - r);
  EXPECT_EQ(pipeline_warmup_passes({4, 1, 2}, 0), 2);
  // Interleaved: 2(P - r - 1) + (V - 1)N, +1 with EP overlap, at most M·V.
  EXPECT_EQ(pipeline_warmup_passes({4, 2, 8}, 0), 2 * 3 + 4);
  EXPECT_EQ(pipeline_warmup_passes({4, 2, 8}, 3), 4);
  EXPECT_EQ(pipeline_warmup_passes({4, 2, 8, 0, true}, 3), 5);
  EXPECT_EQ(pipeline_warmup_passes({2, 8, 2}, 0), 16);  // everything is warm-up: M·V
  // The 1F1B list of the last rank alternates from the start.
  const auto l = pipeline_schedule({4, 1, 3}, 3);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l[i].forward, i % 2 == 0) << i;
}

TEST(PipelineSchedule, EveryPassOnceAndEachBackwardAfterItsForward) {
  for (int64_t P : {1, 2, 3, 4})
    for (int64_t V : {1, 2, 3})
      for (int64_t M : {1, 2, 4, 5, 8, 12}) {
        PipelineScheduleSpec s{P, V, M};
        if (V > 1 && (P < 2 || M < P || M % P != 0)) continue;  // refused (group N = P)
        for (int64_t r = 0; r < P; ++r) {
          std::set<std::tuple<bool, int64_t, int64_t>> seen;
          for (const PipelinePass& p : pipeline_schedule(s, r)) {
            ASSERT_TRUE(seen.insert({p.forward, p.microbatch, p.chunk}).second);
            if (!p.forward) {
              ASSERT_TRUE(seen.count({true, p.microbatch, p.chunk}));
            }
          }
          ASSERT_EQ(int64_t(seen.size()), 2 * M * V) << P << V << M << r;
        }
      }
}

TEST(PipelineSchedule, NoDeadlockAndTheBubbleIsMegatrons) {
  // Uniform passes (backward = 2 × forward, no transfer time): 1F1B's step is (M + P − 1)
  // passes, a bubble of (P − 1)/M; interleaving divides it by V when M is a multiple of P.
  for (int64_t P : {1, 2, 4})
    for (int64_t M : {4, 8, 16}) {
      const PipelineTiming t = simulate_pipeline({P, 1, M}, 1.0, 2.0);
      EXPECT_DOUBLE_EQ(t.bubble_fraction, double(P - 1) / double(M)) << P << " " << M;
      for (int64_t r = 0; r < P; ++r) EXPECT_EQ(t.max_in_flight[size_t(r)], std::min(P - r, M));
    }
  for (int64_t P : {2, 4})
    for (int64_t V : {2, 4})
      for (int64_t M : {P, 2 * P, 4 * P}) {
        const PipelineTiming t = simulate_pipeline({P, V, M}, 1.0 / double(V), 2.0 / double(V));
        EXPECT_NEAR(t.bubble_fraction, double(P - 1) / double(V * M), 1e-12)
            << "P " << P << " V " << V << " M " << M;
      }
  // Every valid group size and remainder runs to the end (no deadlock), transfers included;
  // the group sizes Megatron refuses are exactly the ones whose passes wait in a cycle.
  int refused = 0;
  for (int64_t P : {2, 3, 4})
    for (int64_t V : {2, 3})
      for (int64_t M = P; M <= 3 * P + 1; ++M)
        for (int64_t N = P; N <= M; ++N)
          for (bool ep : {false, true}) {
            const PipelineScheduleSpec s{P, V, M, N, ep};
            if (M % N != 0 && M % N < P) {
              EXPECT_THROW(check_pipeline_schedule(s), Error);
              ++refused;
              continue;
            }
            EXPECT_NO_THROW(simulate_pipeline(s, 1.0, 2.0, 0.25)) << P << V << M << N << ep;
          }
  EXPECT_GT(refused, 0);
}

TEST(PipelineSchedule, InterleavingHoldsMoreMicroBatchesInFlight) {
  // Rank 0 of PP4 VPP2 M8 keeps its 10 warm-up forwards' activations (chunks of half the
  // layers): more passes in flight than 1F1B's 4, as Megatron's memory accounting says.
  const PipelineTiming t = simulate_pipeline({4, 2, 8}, 0.5, 1.0);
  EXPECT_EQ(t.max_in_flight[0], 11);
  EXPECT_EQ(simulate_pipeline({4, 1, 8}, 1.0, 2.0).max_in_flight[0], 4);
}

std::string error_of(const PipelineScheduleSpec& s) {
  try {
    check_pipeline_schedule(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSchedule, RefusesWhatMegatronRefuses) {
  EXPECT_NE(error_of({1, 2, 4}).find("needs --pp >= 2"), std::string::npos);
  EXPECT_NE(error_of({4, 2, 3}).find("[--pp, --grad-accum] = [4, 3]"), std::string::npos);
  EXPECT_NE(error_of({2, 2, 4, 5}).find("groups of 5"), std::string::npos);
  EXPECT_NE(error_of({0, 1, 4}).find("--pp must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({4, 3, 5, 4}).find("5 mod 4 = 1"), std::string::npos);
  EXPECT_EQ(error_of({4, 1, 2}), "");  // 1F1B takes any M
}

}  // namespace
}  // namespace moet

namespace moet {
namespace {

// Per-virtual-stage pass times (what `moet simulate` feeds the schedule): equal times reproduce
// the uniform run; with a heavier stage its rank paces the step, and it cannot start before the
// first forward of rank 0 has reached it.
TEST(PipelineSimulation, PerStageTimes) {
  PipelineScheduleSpec s;
  s.stages = 2;
  s.chunks = 2;
  s.microbatches = 4;
  const PipelineTiming uniform = simulate_pipeline(s, 1.0, 2.0, 0.1);
  const PipelineTiming same =
      simulate_pipeline(s, std::vector<double>(4, 1.0), std::vector<double>(4, 2.0), 0.1);
  EXPECT_EQ(uniform.step_s, same.step_s);
  EXPECT_EQ(uniform.ideal_s, same.ideal_s);
  std::vector<double> f(4, 1.0), b(4, 2.0);
  f[3] = 2.0, b[3] = 4.0;  // virtual stage 3 (rank 1, chunk 1) twice as heavy
  const PipelineTiming heavy = simulate_pipeline(s, f, b, 0.1);
  EXPECT_DOUBLE_EQ(heavy.ideal_s, 4 * (1.0 + 2.0 + 2.0 + 4.0));  // rank 1's compute
  EXPECT_GT(heavy.step_s, uniform.step_s);
  EXPECT_GE(heavy.step_s, heavy.ideal_s + 1.0 + 0.1 - 1e-12);
}

}  // namespace
}  // namespace moet
