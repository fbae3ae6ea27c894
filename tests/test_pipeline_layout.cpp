// Megatron's pipeline layout syntax (src/parallel/pipeline_layout.h), shared by the engine and
// `moet simulate`: DeepSeek-V3's published layouts expand to the stages Megatron gives them,
// and malformed or mismatched layouts are one line.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "parallel/pipeline_layout.h"

namespace moet {
namespace {

std::string error_of(const std::string& layout, int64_t layers, int64_t mtp, int64_t stages) {
  try {
    parse_pipeline_layout(layout, layers, mtp, stages);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineLayout, DeepSeekV3OnPp2Vpp8) {
  // 61 layers + 1 MTP: embedding and 4 layers, 14 stages of 4, then 1 layer, MTP and loss.
  const auto s = parse_pipeline_layout("Et*4|(t*4|)*14tmL", 61, 1, 16);
  ASSERT_EQ(s.size(), 61u + 1 + 2);
  EXPECT_EQ(std::count(s.begin(), s.end(), 0u), 5);   // E t t t t
  EXPECT_EQ(std::count(s.begin(), s.end(), 7u), 4);   // a middle stage
  EXPECT_EQ(std::count(s.begin(), s.end(), 15u), 3);  // t m L
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  // The H100 recipe, PP8 VPP4: "Et|(tt|)*30mL".
  const auto h = parse_pipeline_layout("Et|(tt|)*30mL", 61, 1, 32);
  EXPECT_EQ(h.back(), 31u);
  EXPECT_EQ(std::count(h.begin(), h.end(), 31u), 2);  // m L
}

// The layout a refusal suggests ("--pp does not divide the layers") parses, puts every layer on
// a stage and differs by at most one layer between stages.
TEST(PipelineLayout, BalancedLayoutIsValidAndEven) {
  EXPECT_EQ(balanced_pipeline_layout(3, 1, 2), "Ett|tmL");  // configs/tiny.json on --pp 2
  // DeepSeek-V3 on 16 virtual stages: 61 = 16 x 3 + 13, the 13 spare layers on middle stages
  std::string dsv3 = "Ettt";
  for (int k = 0; k < 13; ++k) dsv3 += "|t*4";
  EXPECT_EQ(balanced_pipeline_layout(61, 1, 16), dsv3 + "|ttt|tttmL");
  EXPECT_EQ(balanced_pipeline_layout(1, 0, 4), "");  // a middle stage would hold nothing
  for (int64_t L = 1; L <= 13; ++L)
    for (int64_t K = 0; K <= 2; ++K)
      for (int64_t S = 1; S <= 8; ++S) {
        const std::string layout = balanced_pipeline_layout(L, K, S);
        if (L < S - 2) {
          EXPECT_EQ(layout, "") << L << " " << S;
          continue;
        }
        std::vector<size_t> stage;
        ASSERT_NO_THROW(stage = parse_pipeline_layout(layout, L, K, S)) << layout;
        std::vector<int64_t> layers(size_t(S), 0);
        for (int64_t l = 0; l < L; ++l) ++layers[size_t(stage[size_t(1 + l)])];
        const auto [lo, hi] = std::minmax_element(layers.begin(), layers.end());
        EXPECT_LE(*hi - *lo, 1) << layout;
        for (int64_t k = 1; k + 1 < S; ++k) EXPECT_GE(layers[size_t(k)], 1) << layout;
      }
}

TEST(PipelineLayout, MistakesAreOneLine) {
  EXPECT_NE(error_of("Et*4|(t*4|)*14tmL", 61, 1, 8).find("has 16 stages; PP×VPP = 8"),
            std::string::npos);
  EXPECT_NE(error_of("Et*3|tL", 61, 1, 2).find("the model needs E, 61 t, 1 m, L"),
            std::string::npos);
  EXPECT_NE(error_of("Et*4|(t*4|", 4, 0, 2).find("missing ')'"), std::string::npos);
  EXPECT_NE(error_of("Ex", 1, 0, 1).find("unexpected 'x'"), std::string::npos);
  EXPECT_NE(error_of("Et*", 1, 0, 1).find("followed by a count"), std::string::npos);
  EXPECT_NE(error_of("(t*100000)*100000", 1, 0, 1).find("expands to more than"), std::string::npos);
  EXPECT_EQ(error_of("E t, t|t L", 3, 0, 2), "");  // spaces and commas are allowed
}

}  // namespace
}  // namespace moet
