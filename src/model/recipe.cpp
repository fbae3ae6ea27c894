#include "model/recipe.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace moet {

Recipe parse_recipe(const std::string& name) {
  if (name == "fp32") return Recipe::FP32;
  if (name == "bf16") return Recipe::BF16;
  if (name == "mxfp8") return Recipe::MXFP8;
  if (name == "fp8-blockwise") return Recipe::FP8Blockwise;
  MOET_FAIL("--precision '", name, "' is not one of fp32, bf16, mxfp8, fp8-blockwise");
}

const char* recipe_name(Recipe r) {
  switch (r) {
    case Recipe::FP32:
      return "fp32";
    case Recipe::BF16:
      return "bf16";
    case Recipe::MXFP8:
      return "mxfp8";
    case Recipe::FP8Blockwise:
      return "fp8-blockwise";
  }
  return "?";
}

PrecisionPolicy resolve_precision(const std::string& name, int64_t bf16_layers) {
  PrecisionPolicy p;
  p.recipe =
      name == "auto" ? (ops::cpu_has_bf16() ? Recipe::BF16 : Recipe::FP32) : parse_recipe(name);
  p.bf16_layers = bf16_layers;
  return p;
}

ops::LinearPrecision PrecisionPolicy::decoder(int64_t layer, int64_t num_layers) const {
  switch (recipe) {
    case Recipe::FP32:
      return {};
    case Recipe::BF16:
      return ops::LinearPrecision::all(ops::Format::BF16);
    case Recipe::MXFP8:
    case Recipe::FP8Blockwise: {
      const bool main = layer < num_layers;
      if (main && (layer < bf16_layers || layer >= num_layers - bf16_layers))
        return ops::LinearPrecision::all(ops::Format::BF16);
      return ops::LinearPrecision::all(recipe == Recipe::MXFP8 ? ops::Format::MXFP8
                                                               : ops::Format::FP8Block);
    }
  }
  return {};
}

ops::LinearPrecision PrecisionPolicy::head() const {
  return recipe == Recipe::FP32 ? ops::LinearPrecision{}
                                : ops::LinearPrecision::all(ops::Format::BF16);
}

ops::Format PrecisionPolicy::combine() const {
  return recipe == Recipe::FP32 ? ops::Format::F32 : ops::Format::BF16;
}

}  // namespace moet
