// What `--precision` resolves to on this machine, and where its GEMMs run (train, eval, bench).
// `auto` is the faster recipe here: bf16 where bf16 GEMMs beat fp32 at the model's shapes, fp32
// where they do not (an Intel Xeon without AMX runs bf16 GEMMs at half fp32's speed) — measured
// by gemm_choice.h's cached probe, never assumed from the CPU's flags. An explicit recipe is
// kept, its operands going through the faster GEMMs, and the header says what the other would
// give. A resumed run keeps what it recorded; --deterministic measures nothing (the CPU's
// default: bf16 where it has bf16 instructions), so no measurement can change its numbers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "measure/gemm_choice.h"
#include "model/recipe.h"

namespace moet {

struct RecipeRequest {
  std::optional<Recipe> asked;    // --precision (nullopt: auto)
  int64_t bf16_layers = 1;        // --bf16-layers
  int64_t bf16_layers_end = -1;   // --bf16-layers-end (negative: as --bf16-layers)
  std::vector<GemmShape> shapes;  // the model's GEMM shapes (model_gemm_shapes)
  std::string recorded_recipe;    // a resumed run's recipe ("" none): auto keeps it
  std::string recorded_operands;  // its operand store ("bf16", "fp32"; "" none)
  bool measure = true;            // false under --deterministic
};

struct RecipeChoice {
  PrecisionPolicy policy;
  DType operands = DType::F32;  // the low-precision operand store (ops::set_gemm_operand_dtype)
  std::string operands_why;     // why that store (kernel_description prints it)
  std::string auto_why;         // auto only: "auto: fp32 (bf16 GEMMs 0.17 TFLOP/s < fp32 0.33 ...)"
  std::string other;            // an explicit recipe that is not the faster: what the other gives
  GemmSpeeds speeds;            // zero when nothing was measured
};

RecipeChoice choose_recipe(const RecipeRequest& r);

// The policy of a recipe with its --bf16-layers and --bf16-layers-end (negative: as
// --bf16-layers).
PrecisionPolicy recipe_policy(Recipe recipe, int64_t bf16_layers, int64_t bf16_layers_end = -1);

}  // namespace moet
