// RankGrid (parallel/rank_grid.h): Megatron's rank layout. tests/rank_grid_interop.py checks the
// groups against megatron-core itself; these cases pin what moet's own layouts rely on.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "parallel/rank_grid.h"

namespace moet {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

TEST(RankGrid, TodaysLayoutsAreTheGridsWithTpCpEtpOne) {
  // --pp 2 on 8 ranks with --ep 2: the pipeline outermost (stage = rank / 4), data-parallel
  // ranks consecutive within a stage, expert groups of 2 consecutive ranks, their edp groups
  // strided by 2 within the stage: what parallelize() and make_parallel_layout split today.
  const RankGrid a = RankGrid::attention(8, 1, 1, 2);
  EXPECT_EQ(a.groups("pp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(a.groups("dp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  const RankGrid e = RankGrid::experts(8, 1, 2, 2);
  EXPECT_EQ(e.groups("ep"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(e.groups("edp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(a.coordinate(r, "pp"), r / 4);
    EXPECT_EQ(e.group_of(r, "ep"), r / 2);
    EXPECT_EQ(e.coordinate(r, "ep"), r % 2);
  }
}

TEST(RankGrid, ParallelFoldingLaysExpertsAcrossDataAndTensorRanks) {
  // TP2 on 4 ranks: attention's dp is 2, yet the experts can be ep 4 over the same ranks
  const RankGrid a = RankGrid::attention(4, 2, 1, 1), e = RankGrid::experts(4, 1, 4, 1);
  EXPECT_EQ(a.groups("tp"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(a.groups("dp"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(e.groups("ep"), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(a.describe(), "tp2 cp1 ep1 dp2 pp1 (tp-cp-ep-dp-pp)");
  EXPECT_EQ(e.describe(), "etp1 ep4 edp1 pp1 (etp-ep-edp-pp)");
  // CP: with tp 2, a context group strides by 2; tp-cp together spans 4 ranks
  const RankGrid c = RankGrid::attention(8, 2, 2, 1);
  EXPECT_EQ(c.groups("cp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(c.groups("tp-cp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  for (int64_t r = 0; r < 8; ++r)
    for (const char* t : {"tp", "cp", "dp", "tp-cp", "dp-cp"}) {
      const Groups g = c.groups(t);
      const std::vector<int64_t>& mine = g[size_t(c.group_of(r, t))];
      EXPECT_NE(std::find(mine.begin(), mine.end(), r), mine.end()) << t << " rank " << r;
    }
}

TEST(RankGrid, AWorldThatDoesNotFactorIsOneLine) {
  try {
    RankGrid::attention(6, 2, 1, 2);
    FAIL() << "6 ranks accepted for --tp 2 --pp 2";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--tp 2 --cp 1 --pp 2 need a multiple of 4 ranks, got 6: run 4 x N ranks, or "
                 "change --tp 2 --cp 1 --pp 2");
  }
  EXPECT_THROW(RankGrid::experts(8, 2, 4, 2), Error);
  EXPECT_THROW(RankGrid::attention(8, 2, 1, 1).groups("xp"), Error);
}

}  // namespace
}  // namespace moet
