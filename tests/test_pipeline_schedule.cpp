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
    if (p.forward()) f.emplace_back(p.microbatch, p.chunk);
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
  for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l[i].forward(), i % 2 == 0) << i;
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
            ASSERT_TRUE(seen.insert({p.forward(), p.microbatch, p.chunk}).second);
            if (!p.forward()) {
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

namespace moet {
namespace {

// The zero-bubble and V schedules (zb1p, zbv, dualpipev): every pass once, in an order whose
// gradients add up as one process's do, their bubble and memory as their authors give them.

constexpr PipelineScheduleKind kNewKinds[] = {
    PipelineScheduleKind::kZB1P, PipelineScheduleKind::kZBV, PipelineScheduleKind::kDualPipeV};

PipelineScheduleSpec spec_of(PipelineScheduleKind k, int64_t P, int64_t M) {
  PipelineScheduleSpec s;
  s.stages = P, s.microbatches = M, s.kind = k, s.chunks = is_v_schedule(k) ? 2 : 1;
  return s;
}

std::string list_of(const std::vector<PipelinePass>& l) {
  std::string out;
  for (const PipelinePass& p : l)
    out += (out.empty() ? "" : " ") + to_string(p) + (p.overlapped ? "&" : "");
  return out;
}

TEST(PipelineSchedule, ZeroBubbleListsHoldEveryPassOnceInGradientOrder) {
  for (PipelineScheduleKind k : kNewKinds)
    for (int64_t P : {1, 2, 3, 4})
      for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 12}) {
        const PipelineScheduleSpec s = spec_of(k, P, M);
        if (k == PipelineScheduleKind::kDualPipeV && M < 2 * P) continue;  // refused below
        for (int64_t r = 0; r < P; ++r) {
          const std::vector<PipelinePass> l = pipeline_schedule(s, r);
          SCOPED_TRACE(std::string(pipeline_schedule_name(k)) + " P" + std::to_string(P) + " M" +
                       std::to_string(M) + " rank " + std::to_string(r) + ": " + list_of(l));
          // (op, micro-batch, chunk) once each; F before its B or I, I before its W
          std::set<std::tuple<int, int64_t, int64_t>> seen;
          // per chunk: the micro-batch of the last F and of the last pass writing weight
          // gradients (B or W), which must rise one by one — the order one process adds them in
          std::vector<int64_t> last_f(2, -1), last_grad(2, -1);
          for (size_t i = 0; i < l.size(); ++i) {
            const PipelinePass& p = l[i];
            ASSERT_TRUE(seen.insert({int(p.op), p.microbatch, p.chunk}).second);
            if (p.forward()) {
              ASSERT_EQ(p.microbatch, last_f[size_t(p.chunk)] + 1);
              last_f[size_t(p.chunk)] = p.microbatch;
            } else {
              ASSERT_TRUE(seen.count({int(PassOp::kForward), p.microbatch, p.chunk}));
            }
            if (p.op == PassOp::kWeightGrad) {
              ASSERT_TRUE(seen.count({int(PassOp::kInputGrad), p.microbatch, p.chunk}));
            }
            if (p.releases()) {
              ASSERT_EQ(p.microbatch, last_grad[size_t(p.chunk)] + 1);
              last_grad[size_t(p.chunk)] = p.microbatch;
            }
            if (p.overlapped) {  // a forward paired with another micro-batch's whole backward
              ASSERT_TRUE(p.forward());
              ASSERT_LT(i + 1, l.size());
              ASSERT_EQ(l[i + 1].op, PassOp::kBackward);
            }
          }
          for (int64_t c = 0; c < s.chunks; ++c) {
            ASSERT_EQ(last_f[size_t(c)], M - 1);
            ASSERT_EQ(last_grad[size_t(c)], M - 1);
          }
        }
        // the lists run to the end against each other, with transfer time and any W share
        EXPECT_NO_THROW(simulate_pipeline(s, 1.0, 2.0, 0.3, 0.4));
      }
}

TEST(PipelineSchedule, TheVPutsTheFirstAndLastStageOnRankZero) {
  for (PipelineScheduleKind k : {PipelineScheduleKind::kZBV, PipelineScheduleKind::kDualPipeV}) {
    const PipelineScheduleSpec s = spec_of(k, 4, 8);
    EXPECT_EQ(pipeline_stage(s, 0, 0), 0);
    EXPECT_EQ(pipeline_stage(s, 0, 1), 7);
    EXPECT_EQ(pipeline_stage(s, 3, 0), 3);
    EXPECT_EQ(pipeline_stage(s, 3, 1), 4);
    for (int64_t k2 = 0; k2 < 8; ++k2) {
      const StagePlace at = pipeline_place(s, k2);
      EXPECT_EQ(pipeline_stage(s, at.rank, at.chunk), k2);
    }
  }
  const PipelineScheduleSpec i{4, 2, 8};
  EXPECT_EQ(pipeline_stage(i, 1, 1), 5);
  EXPECT_EQ(pipeline_place(i, 5).rank, 1);
}

TEST(PipelineSchedule, DualPipeVIsDeepSeeksEightSteps) {
  // P2 M4, rank 0 (dualpipev.py): step 1 two F0; step 2 (F0 F1); step 3 (I1 W1 F1); step 4 two
  // rounds of (F0&B1, F1&B0); step 5 (B1, F1&B0); step 6 (B1 B0) with I from the middle on:
  // rank 0 switches after B1; step 7 (W, I0); step 8 one W.
  const PipelineScheduleSpec s = spec_of(PipelineScheduleKind::kDualPipeV, 2, 5);
  EXPECT_EQ(list_of(pipeline_schedule(s, 0)),
            "F0.0 F1.0 F2.0 F0.1 I0.1 W0.1 F1.1 F3.0& B1.1 F2.1& B0.0 F4.0& B2.1 F3.1& B1.0 "
            "B3.1 F4.1& B2.0 B4.1 I3.0 W3.0 I4.0 W4.0");
  // the last rank: its first F0 and B1 of the main step not overlapped
  EXPECT_EQ(list_of(pipeline_schedule(s, 1)),
            "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1& B0.0 F3.0& B1.1 F3.1& B1.0 F4.0& B2.1 F4.1& B2.0 "
            "B3.1 B3.0 I4.1 I4.0 W4.1 W4.0");
}

TEST(PipelineSchedule, TheBubbleIsTheAuthorsFormula) {
  // Equal stages, no transfer time: each rank's layers F = 2, B = 4 (W half of it), halved per
  // chunk on the V schedules. Every rank's idle time (its bubble) equals the formula: 1F1B
  // (P−1)(F+B); ZB-H1 (P−1)(F+B−2W); DualPipeV (P−1)(F&B+B−3W) per chunk (DeepSeek's
  // (PP/2 − 1)(…) with PP = 2P stages). ZB-V leaves P − 1 chunk forwards.
  for (int64_t P : {2, 3, 4})
    for (int64_t M : {2 * P, 4 * P, 4 * P + 1}) {
      for (PipelineScheduleKind k :
           {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZB1P, PipelineScheduleKind::kZBV,
            PipelineScheduleKind::kDualPipeV}) {
        const PipelineScheduleSpec s = spec_of(k, P, M);
        const double F = 2.0 / double(s.chunks), B = 4.0 / double(s.chunks), W = B / 2;
        const PipelineTiming t = simulate_pipeline(s, F, B, 0.0, 0.5);
        const double want = k == PipelineScheduleKind::kZBV ? double(P - 1) * F
                                                            : pipeline_bubble_formula_s(s, F, B, W);
        for (int64_t r = 0; r < P; ++r)
          EXPECT_NEAR(t.idle_s[size_t(r)], want, 1e-9)
              << pipeline_schedule_name(k) << " P" << P << " M" << M << " rank " << r;
        EXPECT_NEAR(t.ideal_s, double(M) * (F + B) * double(s.chunks), 1e-9);
      }
    }
  // zb1p and dualpipev below 1F1B's bubble; equal-stage formulas ordered as FACTS §8 says
  const PipelineScheduleSpec one = spec_of(PipelineScheduleKind::k1F1B, 4, 16);
  const PipelineScheduleSpec zb = spec_of(PipelineScheduleKind::kZB1P, 4, 16);
  EXPECT_LT(simulate_pipeline(zb, 2, 4).step_s, simulate_pipeline(one, 2, 4).step_s);
}

TEST(PipelineSchedule, ZeroBubbleMemoryIsTheAuthors) {
  // Activations held (forwards whose W is not done): ZB-H1 no rank above 1F1B's first rank (P
  // micro-batches); ZB-V 2P chunks (P micro-batches of a rank's layers); DualPipeV 2P + 1 chunks
  // (DeepSeek's PP + 1).
  for (int64_t P : {2, 3, 4}) {
    const int64_t M = 4 * P;
    for (int64_t r = 0; r < P; ++r) {
      EXPECT_LE(simulate_pipeline(spec_of(PipelineScheduleKind::kZB1P, P, M), 1, 2)
                    .max_in_flight[size_t(r)],
                P);
      EXPECT_EQ(simulate_pipeline(spec_of(PipelineScheduleKind::kZBV, P, M), 1, 2)
                    .max_in_flight[size_t(r)],
                2 * P);
      EXPECT_EQ(simulate_pipeline(spec_of(PipelineScheduleKind::kDualPipeV, P, M), 1, 2)
                    .max_in_flight[size_t(r)],
                2 * P + 1);
    }
  }
}

TEST(PipelineSchedule, ScheduleNamesAndRefusals) {
  EXPECT_EQ(parse_pipeline_schedule("dualpipev"), PipelineScheduleKind::kDualPipeV);
  EXPECT_EQ(parse_pipeline_schedule("DualPipeV"), PipelineScheduleKind::kDualPipeV);
  EXPECT_EQ(parse_pipeline_schedule("ZBVZeroBubble"), PipelineScheduleKind::kZBV);
  EXPECT_EQ(parse_pipeline_schedule("Interleaved1F1B"), PipelineScheduleKind::kInterleaved);
  EXPECT_EQ(parse_pipeline_schedule("1F1B"), PipelineScheduleKind::k1F1B);
  EXPECT_EQ(parse_pipeline_schedule("zb1p"), PipelineScheduleKind::kZB1P);
  try {
    parse_pipeline_schedule("gpipe");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use 1f1b, interleaved, zb1p, zbv or dualpipev"),
              std::string::npos);
  }
  PipelineScheduleSpec s = spec_of(PipelineScheduleKind::kDualPipeV, 4, 7);
  EXPECT_NE(error_of(s).find("at least 2 x --pp = 8 micro-batches"), std::string::npos);
  s.microbatches = 8;
  EXPECT_EQ(error_of(s), "");
  s.chunks = 4;
  EXPECT_NE(error_of(s).find("--vpp must be 2 or left out"), std::string::npos);
  s = spec_of(PipelineScheduleKind::kZB1P, 2, 4);
  s.chunks = 2;
  EXPECT_NE(error_of(s).find("drop --vpp 2"), std::string::npos);
  s = spec_of(PipelineScheduleKind::kZBV, 2, 4);
  s.ep_overlap = true;
  EXPECT_NE(error_of(s).find("use dualpipev"), std::string::npos);
}

}  // namespace
}  // namespace moet
