// GradientTree adds leaves in exactly tree_sum's canonical order, for any number of leaves, and
// a tree over P aligned runs of 2^k leaves equals the tree over all of them (what makes
// --deterministic data parallelism equal one process bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/tree_sum.h"
#include "train/gradient_tree.h"

namespace moet {
namespace {

std::vector<std::vector<float>> random_leaves(int n, int numel) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> leaves(static_cast<size_t>(n), std::vector<float>(numel));
  for (auto& l : leaves)
    for (float& x : l) x = u(gen) * std::exp2(float(int(gen() % 20) - 10));  // mixed scales
  return leaves;
}

TEST(GradientTree, MatchesTreeSumBitForBit) {
  const int numel = 257;
  GradientTree tree(numel);
  for (int n = 1; n <= 13; ++n) {
    auto leaves = random_leaves(n, numel);
    tree.reset();
    for (const auto& l : leaves) tree.push(l.data());
    EXPECT_EQ(tree.leaves(), n);
    std::vector<float> got(numel);
    tree.finish(got.data());
    for (int i = 0; i < numel; ++i) {
      float want = tree_sum<float>(0, n, [&](int k) { return leaves[size_t(k)][size_t(i)]; });
      ASSERT_EQ(std::memcmp(&got[size_t(i)], &want, sizeof(float)), 0)
          << n << " leaves, element " << i;
    }
  }
}

TEST(GradientTree, AlignedRunsReproduceTheWholeTree) {
  const int numel = 64, P = 4, run = 4;
  auto leaves = random_leaves(P * run, numel);
  GradientTree tree(numel);
  std::vector<std::vector<float>> per_rank(P, std::vector<float>(numel));
  for (int r = 0; r < P; ++r) {
    tree.reset();
    for (int s = 0; s < run; ++s) tree.push(leaves[size_t(r * run + s)].data());
    tree.finish(per_rank[size_t(r)].data());
  }
  tree.reset();
  for (int r = 0; r < P; ++r) tree.push(per_rank[size_t(r)].data());
  std::vector<float> nested(numel), flat(numel);
  tree.finish(nested.data());
  tree.reset();
  for (const auto& l : leaves) tree.push(l.data());
  tree.finish(flat.data());
  EXPECT_EQ(std::memcmp(nested.data(), flat.data(), numel * sizeof(float)), 0);
  // and pairing the same leaves differently (rotated by one) gives different bits: order matters
  tree.reset();
  for (int k = 0; k < P * run; ++k) tree.push(leaves[size_t((k + 1) % (P * run))].data());
  std::vector<float> rotated(numel);
  tree.finish(rotated.data());
  EXPECT_NE(std::memcmp(rotated.data(), flat.data(), numel * sizeof(float)), 0);
}

}  // namespace
}  // namespace moet
