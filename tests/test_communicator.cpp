// LocalCommunicator (one process: collectives are copies) and the canonical reduction order
// tree_sum(), including the claim that aligned power-of-two groups reproduce a flat reduction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "parallel/local_communicator.h"

namespace moet {
namespace {

TEST(LocalCommunicator, IsOneRank) {
  LocalCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  std::vector<float> x = {1e8f, 1.0f, -1e8f};
  c.allreduce_sum(x.data(), 3);
  EXPECT_EQ(x, (std::vector<float>{1e8f, 1.0f, -1e8f}));
  c.barrier();
  auto group = c.split(3, 7);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
}

TEST(LocalCommunicator, CollectivesCopy) {
  LocalCommunicator c;
  const char src[] = "abcdefgh";
  char dst[9] = {};
  c.allgather(src, 8, dst);
  EXPECT_STREQ(dst, "abcdefgh");
  char dst2[9] = {};
  c.alltoall(src, 8, dst2);
  EXPECT_STREQ(dst2, "abcdefgh");
  char dst3[9] = "........";
  const int64_t sb = 3, so = 2, rb = 3, ro = 4;
  c.alltoallv(src, &sb, &so, dst3, &rb, &ro);
  EXPECT_STREQ(dst3, "....cde.");
  const int64_t wrong = 2;
  EXPECT_THROW(c.alltoallv(src, &sb, &so, dst3, &wrong, &ro), Error);
}

TEST(LocalCommunicator, AbortPrintsAndExits) {
  EXPECT_EXIT(LocalCommunicator().abort("out of cheese"), ::testing::ExitedWithCode(1),
              "moet: rank 0: out of cheese");
}

TEST(TreeSum, Order) {
  // ((a + b) + (c + d)) + e for five contributions.
  const float x[5] = {1e8f, 1.0f, -1e8f, 1.0f, 0.5f};
  const float got = tree_sum<float>(0, 5, [&](int i) { return x[i]; });
  const float want = ((x[0] + x[1]) + (x[2] + x[3])) + x[4];
  EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0);
  EXPECT_EQ(tree_sum<float>(2, 3, [&](int i) { return x[i]; }), x[2]);
}

// tree_sum over 4 = tree_sum over the two aligned pair sums; over 8 = over the two aligned
// halves = over the four aligned pairs. So groups that are aligned power-of-two blocks of the
// world, reduced within and then across, give the bits of the flat reduction.
TEST(TreeSum, AlignedBlocksReproduceFlat) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-12, 27);
  for (int trial = 0; trial < 20000; ++trial) {
    float v[8];
    for (float& f : v) f = std::ldexp(mant(rng), exp(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    auto val = [&](int i) { return v[i]; };
    const float flat4 = tree_sum<float>(0, 4, val);
    float pair4[2] = {tree_sum<float>(0, 2, val), tree_sum<float>(2, 4, val)};
    const float hier4 = tree_sum<float>(0, 2, [&](int j) { return pair4[j]; });
    ASSERT_EQ(std::memcmp(&flat4, &hier4, sizeof flat4), 0);
    const float flat8 = tree_sum<float>(0, 8, val);
    float pair8[4];
    for (int j = 0; j < 4; ++j) pair8[j] = tree_sum<float>(2 * j, 2 * j + 2, val);
    const float hier8 = tree_sum<float>(0, 4, [&](int j) { return pair8[j]; });
    ASSERT_EQ(std::memcmp(&flat8, &hier8, sizeof flat8), 0);
  }
}

}  // namespace
}  // namespace moet
