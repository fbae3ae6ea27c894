// comm_bytes' gradient part under mpirun (2 ranks): DataParallel::take_sync_bytes() counts what
// this rank sends for the gradient reductions. moet's all-reduce is a reduce-scatter then an
// all-gather, so a bucket of n floats over 2 ranks sends exactly 4n bytes per rank (n − s of the
// other rank's slice, then its own slice s); ZeRO-1's reduce-scatter plus parameter all-gather
// send the same. Expert weights reduce over the expert-data-parallel group (1 rank at --ep 2:
// nothing sent).
#include <gtest/gtest.h>

#include "mpi_test_util.h"
#include "mpi_train_util.h"

namespace moet {
namespace {

constexpr int kSteps = 3;

test::TrainRun run(int ep, bool zero1, bool overlap, int64_t grad_accum, bool deterministic) {
  test::TrainSetup o;
  o.ep = ep;
  o.zero1 = zero1;
  o.overlap = overlap;
  o.grad_accum = grad_accum;
  o.deterministic = deterministic;
  o.steps = kSteps;
  return test::train_tiny(o);
}

TEST(GradSyncBytes, AreTheGradientBytesPerReductionAtTwoRanks) {
  ASSERT_EQ(test::world().size(), 2) << "the exact counts hold at 2 ranks";
  const test::TrainRun all = run(1, false, false, 1, false);
  ASSERT_GT(all.dense_numel, 0);
  ASSERT_GT(all.expert_numel, 0);
  const int64_t every = 4 * (all.dense_numel + all.expert_numel);
  EXPECT_EQ(all.grad_sync_bytes, kSteps * every);
  // the communication thread changes when, not what
  EXPECT_EQ(run(1, false, true, 1, false).grad_sync_bytes, kSteps * every);
  EXPECT_EQ(run(1, true, false, 1, false).grad_sync_bytes, kSteps * every) << "ZeRO-1";
  // gradient accumulation reduces once per step ...
  EXPECT_EQ(run(1, false, false, 2, false).grad_sync_bytes, kSteps * every);
  // ... but --deterministic after every micro-batch
  EXPECT_EQ(run(1, false, false, 2, true).grad_sync_bytes, 2 * kSteps * every);
  // --ep 2: each rank holds half the experts, alone (edp 1): only the dense weights travel
  const test::TrainRun ep = run(2, false, false, 1, false);
  EXPECT_EQ(ep.dense_numel, all.dense_numel);
  EXPECT_EQ(ep.grad_sync_bytes, kSteps * 4 * ep.dense_numel);
  if (test::world().rank() == 0)
    std::printf(
        "[grad bytes] tiny.json: %lld dense + %lld expert trainable floats: %lld bytes "
        "per step per rank (ep 1), %lld (ep 2)\n",
        (long long)all.dense_numel, (long long)all.expert_numel, (long long)every,
        (long long)(4 * ep.dense_numel));
}

}  // namespace
}  // namespace moet
