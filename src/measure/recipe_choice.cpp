#include "measure/recipe_choice.h"

#include <cstdio>

#include "core/error.h"
#include "kernels/ops.h"

namespace moet {

namespace {

std::string fixed(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// "bf16 GEMMs 0.43 TFLOP/s >= fp32 0.19 at the model's shapes[, measured earlier on this CPU]"
std::string speeds_text(const GemmSpeeds& s) {
  return "bf16 GEMMs " + fixed(s.bf16_tflops) + " TFLOP/s " +
         (s.bf16_tflops >= s.fp32_tflops ? ">= " : "< ") + "fp32 " + fixed(s.fp32_tflops) +
         " at the model's shapes" + (s.cached ? ", measured earlier on this CPU" : "");
}

}  // namespace

PrecisionPolicy recipe_policy(Recipe recipe, int64_t bf16_layers, int64_t bf16_layers_end) {
  PrecisionPolicy p;
  p.recipe = recipe;
  p.bf16_layers = bf16_layers;
  p.bf16_layers_end = bf16_layers_end < 0 ? bf16_layers : bf16_layers_end;
  return p;
}

RecipeChoice choose_recipe(const RecipeRequest& r) {
  RecipeChoice c;
  const bool bf16_default = ops::cpu_has_bf16();  // (false under MOET_NO_BF16_GEMM=1)
  auto finish = [&](Recipe recipe) {
    c.policy = recipe_policy(recipe, r.bf16_layers, r.bf16_layers_end);
    return c;
  };
  // a resumed auto run: its recipe and store as recorded
  if (!r.asked && !r.recorded_recipe.empty()) {
    const GemmOperandChoice g = choose_gemm_operands(r.shapes, r.recorded_operands);
    c.operands = g.dtype, c.operands_why = g.reason;
    c.auto_why = "auto: " + r.recorded_recipe + " (as the run recorded)";
    return finish(parse_recipe(r.recorded_recipe));
  }
  // no measurement: the CPU's flags (and the test switches) decide
  if (!r.measure || ops::gemm_operand_dtype_forced() || !bf16_default) {
    c.operands = ops::gemm_operand_dtype();
    c.operands_why = ops::gemm_operand_reason();
    if (!r.measure) c.operands_why += "; --deterministic measures nothing";
    const Recipe recipe = r.asked ? *r.asked : bf16_default ? Recipe::BF16 : Recipe::FP32;
    if (!r.asked)
      c.auto_why = std::string("auto: ") + recipe_name(recipe) + " (" + c.operands_why + ")";
    return finish(recipe);
  }
  // bf16 instructions: which GEMMs are the faster here is measured (cached)
  const bool resumed_store = !r.recorded_operands.empty();
  const GemmOperandChoice g = choose_gemm_operands(r.shapes, r.recorded_operands);
  c.operands = g.dtype, c.operands_why = g.reason;
  c.speeds = resumed_store ? gemm_speeds(r.shapes) : g.speeds;
  const bool bf16_faster = c.speeds.bf16_tflops >= c.speeds.fp32_tflops;
  const Recipe fastest = bf16_faster ? Recipe::BF16 : Recipe::FP32;
  if (!r.asked) {
    c.auto_why = std::string("auto: ") + recipe_name(fastest) + " (" + speeds_text(c.speeds) + ")";
    return finish(fastest);
  }
  const double ratio = bf16_faster ? c.speeds.bf16_tflops / c.speeds.fp32_tflops
                                   : c.speeds.fp32_tflops / c.speeds.bf16_tflops;
  if (*r.asked == Recipe::FP32 && bf16_faster)
    c.other = "bf16 GEMMs run " + fixed(ratio) +
              "x fp32's here at the model's shapes: --precision bf16 (or auto) would use them";
  else if (*r.asked != Recipe::FP32 && !bf16_faster)
    c.other = "fp32 GEMMs run " + fixed(ratio) +
              "x bf16's here at the model's shapes: this recipe's operands go through them, and "
              "--precision fp32 (or auto) saves their roundings";
  return finish(*r.asked);
}

}  // namespace moet
