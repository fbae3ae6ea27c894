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
