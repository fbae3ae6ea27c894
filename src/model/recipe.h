// The training recipe (--precision fp32 | bf16 | mxfp8 | fp8-blockwise | nvfp4 | mxfp4,
// docs/precision.md), its
// names, and its PrecisionPolicy: which number format (kernels/number_format.h) each GEMM of the
// model runs in. Layers ask it for their linear layers' formats once, at construction; the
// kernels quantize, so the model's math reads the same in every precision.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/enum_table.h"
#include "kernels/number_format.h"

namespace moet {

enum class Recipe : uint8_t { FP32, BF16, MXFP8, FP8Blockwise, NVFP4, MXFP4 };

// Each recipe, one row per Recipe in the enum's order: its --precision name and the number format
// of each GEMM role (docs/precision.md's table of the recipes lists them in this order). The
// router's gate projection is fp32 under every recipe (as Megatron's --moe-router-dtype fp32).
struct RecipeTraits {
  Recipe recipe;
  const char* name;  // as --precision (and the simulator's --precision) takes it
  // The decoder layers' linears: attention projections, dense MLP, shared and routed experts
  // (fprop, dgrad, wgrad); the MoE tokens travel to the experts in their fprop format (under the
  // FP4 recipes each (expert, source) segment quantized on its own, TokenDispatcher).
  ops::LinearPrecision decoder;
  // The first --bf16-layers and the last --bf16-layers-end decoder layers of the main model run
  // bf16 instead (Megatron's num_layers_at_start_in_bf16 / _end_in_bf16, for its FP8 and FP4
  // recipes).
  bool bf16_edge_layers;
  ops::Format head;       // the output projection (LM head) and the MTP modules' eh_proj
  ops::Format attention;  // core attention's q·kᵀ and p·v operands (statistics fp32)
  ops::Format combine;    // the expert outputs on their way back
};

// recipe, name, decoder linears, bf16 edge layers, head, attention, combine
inline constexpr RecipeTraits kRecipes[] = {
    {Recipe::FP32, "fp32", ops::LinearPrecision::all(ops::Format::F32), false, ops::Format::F32,
     ops::Format::F32, ops::Format::F32},
    {Recipe::BF16, "bf16", ops::LinearPrecision::all(ops::Format::BF16), false, ops::Format::BF16,
     ops::Format::BF16, ops::Format::BF16},
    {Recipe::MXFP8, "mxfp8", ops::LinearPrecision::all(ops::Format::MXFP8), true, ops::Format::BF16,
     ops::Format::BF16, ops::Format::BF16},
    {Recipe::FP8Blockwise, "fp8-blockwise", ops::LinearPrecision::all(ops::Format::FP8Block), true,
     ops::Format::BF16, ops::Format::BF16, ops::Format::BF16},
    {Recipe::NVFP4, "nvfp4", ops::LinearPrecision::all(ops::Format::NVFP4), true, ops::Format::BF16,
     ops::Format::BF16, ops::Format::BF16},
    {Recipe::MXFP4, "mxfp4", ops::LinearPrecision::all(ops::Format::MXFP4), true, ops::Format::BF16,
     ops::Format::BF16, ops::Format::BF16},
};

constexpr const RecipeTraits& recipe_traits(Recipe r) { return kRecipes[static_cast<size_t>(r)]; }
static_assert(rows_in_enum_order(kRecipes, &RecipeTraits::recipe),
              "kRecipes: one row per Recipe, in the enum's order");

// A row's name ("fp32", "bf16", "mxfp8", "fp8-blockwise"); anything else is a user error naming
// the choices.
Recipe parse_recipe(const std::string& name);
inline const char* recipe_name(Recipe r) { return recipe_traits(r).name; }
// MXFP8 and FP8-blockwise: the recipes whose decoder GEMMs multiply FP8 operands.
inline bool is_fp8_recipe(Recipe r) { return ops::is_fp8(recipe_traits(r).decoder.fprop); }
// NVFP4 and MXFP4: the recipes whose decoder GEMMs multiply FP4 operands.
inline bool is_fp4_recipe(Recipe r) { return ops::is_fp4(recipe_traits(r).decoder.fprop); }

struct PrecisionPolicy;
// The policy of --precision NAME (or "auto": bf16 where the CPU multiplies bf16, else fp32),
// --bf16-layers and --bf16-layers-end (negative: as many as --bf16-layers).
PrecisionPolicy resolve_precision(const std::string& name, int64_t bf16_layers,
                                  int64_t bf16_layers_end = -1);

struct PrecisionPolicy {
  Recipe recipe = Recipe::FP32;
  // FP8 and FP4 recipes: the first bf16_layers and the last bf16_layers_end decoder layers of
  // the main model run in bf16 (Megatron's num_layers_at_start_in_bf16 / _end_in_bf16, default 1
  // each; NVIDIA's NVFP4 paper kept the first 2 and the last 8 of 62).
  int64_t bf16_layers = 1;
  int64_t bf16_layers_end = 1;
  // "first and last 1 layers", "first 2 and last 8 layers" (for the header and reports).
  std::string bf16_edge_words() const;

  // The linear layers (attention projections, dense MLP, shared and routed experts) of decoder
  // layer `layer` of `num_layers`; layer >= num_layers is an MTP module's block, which follows
  // the recipe.
  ops::LinearPrecision decoder(int64_t layer, int64_t num_layers) const;
  // The output projection (LM head) and the MTP modules' eh_proj: bf16 unless fp32.
  ops::LinearPrecision head() const {
    return ops::LinearPrecision::all(recipe_traits(recipe).head);
  }
  // The router's gate projection: fp32 always (as Megatron's --moe-router-dtype fp32).
  ops::LinearPrecision router() const { return {}; }
  // Core attention's two products (q·kᵀ, p·v): bf16 operands unless fp32 (softmax statistics and
  // accumulation fp32), as Megatron runs attention in bf16 under its FP8 recipes.
  ops::Format attention() const { return recipe_traits(recipe).attention; }
  // The format the MoE tokens travel to the experts in: that of the experts' fprop (FP8 rows
  // with their scales under an FP8 recipe, bf16 rows under bf16, FP4 codes with their scales
  // under the FP4 recipes, each (expert, source) segment quantized on its own); expert outputs
  // come back in bf16 unless fp32.
  ops::Format dispatch(int64_t layer, int64_t num_layers) const {
    return dispatch_format(decoder(layer, num_layers));
  }
  static ops::Format dispatch_format(const ops::LinearPrecision& experts) { return experts.fprop; }
  ops::Format combine() const { return recipe_traits(recipe).combine; }
};

}  // namespace moet
