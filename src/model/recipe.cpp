#include "model/recipe.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace moet {

Recipe parse_recipe(const std::string& name) {
  std::string names;
  for (const RecipeTraits& t : kRecipes) {
    if (name == t.name) return t.recipe;
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  }
  MOET_FAIL("--precision '", name, "' is not one of ", names);
}

PrecisionPolicy resolve_precision(const std::string& name, int64_t bf16_layers,
                                  int64_t bf16_layers_end) {
  PrecisionPolicy p;
  p.recipe =
      name == "auto" ? (ops::cpu_has_bf16() ? Recipe::BF16 : Recipe::FP32) : parse_recipe(name);
  p.bf16_layers = bf16_layers;
  p.bf16_layers_end = bf16_layers_end < 0 ? bf16_layers : bf16_layers_end;
  return p;
}

std::string PrecisionPolicy::bf16_edge_words() const {
  if (bf16_layers == 0 && bf16_layers_end == 0) return "no layers";
  if (bf16_layers == bf16_layers_end)
    return "first and last " + std::to_string(bf16_layers) + " layers";
  return "first " + std::to_string(bf16_layers) + " and last " + std::to_string(bf16_layers_end) +
         " layers";
}

ops::LinearPrecision PrecisionPolicy::decoder(int64_t layer, int64_t num_layers) const {
  const RecipeTraits& t = recipe_traits(recipe);
  const bool main = layer < num_layers;
  if (t.bf16_edge_layers && main && (layer < bf16_layers || layer >= num_layers - bf16_layers_end))
    return ops::LinearPrecision::all(ops::Format::BF16);
  return t.decoder;
}

}  // namespace moet
