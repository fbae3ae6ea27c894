// The tables of number formats (kernels/number_format.h) and recipes (model/recipe.h): names
// parse back to their rows, each recipe's policy gives every GEMM role the format its row says,
// and docs/precision.md's table of the recipes lists the recipes in the table's order.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "kernels/number_format.h"
#include "model/recipe.h"

namespace moet {
namespace {

using ops::Format;
using ops::LinearPrecision;

bool same(const LinearPrecision& a, const LinearPrecision& b) {
  return a.fprop == b.fprop && a.dgrad == b.dgrad && a.wgrad == b.wgrad;
}

TEST(Recipe, NamesParseBackToTheirRows) {
  std::set<std::string> names;
  for (const RecipeTraits& t : kRecipes) {
    EXPECT_EQ(parse_recipe(t.name), t.recipe);
    EXPECT_STREQ(recipe_name(t.recipe), t.name);
    EXPECT_TRUE(names.insert(t.name).second) << t.name << " twice";
  }
  try {
    parse_recipe("fp16");
    ADD_FAILURE() << "fp16 parsed";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--precision 'fp16' is not one of fp32, bf16, mxfp8, fp8-blockwise, nvfp4, mxfp4");
  }
  std::set<std::string> formats;
  for (const ops::FormatTraits& f : ops::kFormats) {
    EXPECT_STREQ(ops::format_name(f.format), f.name);
    EXPECT_TRUE(formats.insert(f.name).second) << f.name << " twice";
  }
}

// The policy each recipe gives the GEMM roles, as docs/precision.md's table states it.
TEST(Recipe, EachRoleRunsInItsRowsFormat) {
  const int64_t L = 6;
  for (const RecipeTraits& t : kRecipes) {
    PrecisionPolicy p;
    p.recipe = t.recipe, p.bf16_layers = 1;
    const Format high = t.recipe == Recipe::FP32 ? Format::F32 : Format::BF16;
    EXPECT_TRUE(same(p.head(), LinearPrecision::all(high))) << t.name;
    EXPECT_EQ(p.attention(), high) << t.name;
    EXPECT_EQ(p.combine(), high) << t.name;
    EXPECT_TRUE(p.router().is_f32()) << t.name;
    EXPECT_EQ(is_fp8_recipe(t.recipe) || is_fp4_recipe(t.recipe), t.bf16_edge_layers) << t.name;
    for (int64_t layer = 0; layer <= L; ++layer) {  // layer L: an MTP module's block
      const bool edge = t.bf16_edge_layers && (layer == 0 || layer == L - 1);
      const LinearPrecision want = edge ? LinearPrecision::all(Format::BF16) : t.decoder;
      EXPECT_TRUE(same(p.decoder(layer, L), want)) << t.name << " layer " << layer;
      // the tokens travel in the experts' fprop format (FP4: codes, a segment at a time)
      EXPECT_EQ(p.dispatch(layer, L), want.fprop) << t.name << " layer " << layer;
    }
  }
  EXPECT_TRUE(same(recipe_traits(Recipe::MXFP8).decoder, LinearPrecision::all(Format::MXFP8)));
  EXPECT_TRUE(
      same(recipe_traits(Recipe::FP8Blockwise).decoder, LinearPrecision::all(Format::FP8Block)));
  EXPECT_TRUE(same(recipe_traits(Recipe::NVFP4).decoder, LinearPrecision::all(Format::NVFP4)));
  EXPECT_TRUE(same(recipe_traits(Recipe::MXFP4).decoder, LinearPrecision::all(Format::MXFP4)));
}

// --bf16-layers 2 --bf16-layers-end 8 (NVIDIA's NVFP4 run): bf16 at the start and the end
// apart; --bf16-layers alone sets both; an MTP block follows the recipe.
TEST(Recipe, Bf16LayersAtStartAndEndApart) {
  const int64_t L = 12;
  const PrecisionPolicy p = resolve_precision("nvfp4", 2, 8);
  for (int64_t layer = 0; layer <= L; ++layer) {
    const bool bf16 = layer < 2 || (layer >= L - 8 && layer < L);
    EXPECT_EQ(p.decoder(layer, L).fprop, bf16 ? Format::BF16 : Format::NVFP4) << layer;
  }
  EXPECT_EQ(p.bf16_edge_words(), "first 2 and last 8 layers");
  const PrecisionPolicy same_both = resolve_precision("mxfp8", 3);
  EXPECT_EQ(same_both.bf16_layers_end, 3);
  EXPECT_EQ(same_both.bf16_edge_words(), "first and last 3 layers");
  EXPECT_EQ(same_both.decoder(L - 3, L).fprop, Format::BF16);
  EXPECT_EQ(same_both.decoder(L - 4, L).fprop, Format::MXFP8);
  const PrecisionPolicy none_at_end = resolve_precision("mxfp4", 1, 0);
  EXPECT_EQ(none_at_end.decoder(0, L).fprop, Format::BF16);
  EXPECT_EQ(none_at_end.decoder(L - 1, L).fprop, Format::MXFP4);
}

TEST(Recipe, DocsListTheRecipesInTheTablesOrder) {
  const std::string docs = read_text_file(std::string(MOET_SOURCE_DIR) + "/docs/precision.md");
  const size_t table = docs.find("## The recipes");
  ASSERT_NE(table, std::string::npos);
  size_t at = table;
  for (const RecipeTraits& t : kRecipes) {
    const size_t row = docs.find(std::string("\n| `") + t.name + "` |", at);
    EXPECT_NE(row, std::string::npos) << "docs/precision.md's table of the recipes has no row "
                                      << t.name << " after the previous recipe's";
    if (row != std::string::npos) at = row + 1;
  }
}

}  // namespace
}  // namespace moet
