#include "measure/gemm_choice.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "core/file_io.h"
#include "kernels/ops.h"
#include "measure/best_of.h"
#include "measure/speed_cache.h"

namespace moet {

namespace {

// The cache key: what the speeds depend on.
std::string speeds_key(const std::vector<GemmShape>& shapes) {
  std::ostringstream key;
  key << machine_key() << " |";
  for (const GemmShape& s : shapes) key << " " << s.m << "x" << s.n << "x" << s.k;
  return key.str();
}

// Seconds of one pass over the shapes, best of several.
double time_shapes(const std::vector<GemmShape>& shapes, DType dtype) {
  int64_t floats = 0;
  for (const GemmShape& s : shapes) floats += s.m * s.k + s.n * s.k + s.m * s.n;
  Arena arena(size_t(floats) * 2 * sizeof(float) + 4096 * shapes.size() * 4);
  struct Operands {
    Tensor a, b, c;
  };
  std::vector<Operands> ops_of;
  for (const GemmShape& s : shapes) {
    Operands o;
    Tensor a32 = arena.alloc_f32({s.m, s.k}), b32 = arena.alloc_f32({s.n, s.k});
    ops::fill(a32, 0.5);
    ops::fill(b32, 0.25);
    o.a = a32, o.b = b32;
    if (dtype == DType::BF16) {
      o.a = arena.alloc(DType::BF16, {s.m, s.k});
      o.b = arena.alloc(DType::BF16, {s.n, s.k});
      ops::copy(a32, o.a);
      ops::copy(b32, o.b);
    }
    o.c = arena.alloc_f32({s.m, s.n});
    ops_of.push_back(o);
  }
  const BestOf how{.warmups = 2, .min_calls = 5, .min_seconds = 0.05, .max_calls = 50};
  return best_seconds(
      [&] {
        for (Operands& o : ops_of) ops::gemm(o.a, false, o.b, true, o.c);
      },
      how);
}

}  // namespace

std::vector<GemmShape> model_gemm_shapes(const ModelConfig& cfg, int64_t tokens) {
  const int64_t m = std::max<int64_t>(1, std::min<int64_t>(tokens, 2048));
  std::vector<GemmShape> shapes;
  if (cfg.intermediate_size > 0) shapes.push_back({m, 2 * cfg.intermediate_size, cfg.hidden_size});
  if (cfg.n_routed_experts > 0 && cfg.moe_intermediate_size > 0) {
    const int64_t rows = std::max<int64_t>(
        16, m * std::max<int64_t>(1, cfg.num_experts_per_tok) / cfg.n_routed_experts);
    shapes.push_back({rows, 2 * cfg.moe_intermediate_size, cfg.hidden_size});
  }
  shapes.push_back({m, cfg.vocab_size, cfg.hidden_size});
  return shapes;
}

GemmSpeeds gemm_speeds(const std::vector<GemmShape>& shapes) {
  MOET_ASSERT(!shapes.empty());
  const std::string key = speeds_key(shapes);
  GemmSpeeds s;
  if (const std::optional<nlohmann::json> c = cached_speed(key);
      c && c->is_object() && c->value("fp32_tflops", 0.0) > 0 && c->value("bf16_tflops", 0.0) > 0) {
    s.fp32_tflops = (*c)["fp32_tflops"].get<double>();
    s.bf16_tflops = (*c)["bf16_tflops"].get<double>();
    s.cached = true;
    return s;
  }
  double flop = 0;
  for (const GemmShape& g : shapes) flop += 2.0 * double(g.m) * double(g.n) * double(g.k);
  s.fp32_tflops = flop / time_shapes(shapes, DType::F32) / 1e12;
  s.bf16_tflops = flop / time_shapes(shapes, DType::BF16) / 1e12;
  remember_speed(key, {{"fp32_tflops", s.fp32_tflops}, {"bf16_tflops", s.bf16_tflops}});
  return s;
}

const char* gemm_operands_name(DType dtype) { return dtype == DType::BF16 ? "bf16" : "fp32"; }

GemmOperandChoice choose_gemm_operands(const std::vector<GemmShape>& shapes,
                                       const std::string& recorded) {
  GemmOperandChoice c;
  if (ops::gemm_operand_dtype_forced()) {
    c.dtype = ops::gemm_operand_dtype();
    c.reason = ops::gemm_operand_reason();
    return c;
  }
  if (recorded == "bf16" || recorded == "fp32") {
    c.dtype = recorded == "bf16" ? DType::BF16 : DType::F32;
    c.reason = "as the run recorded";
    return c;
  }
  if (!ops::cpu_has_bf16()) {
    c.dtype = DType::F32;
    c.reason = "no bf16 instructions";
    return c;
  }
  c.speeds = gemm_speeds(shapes);
  char buf[160];
  const bool bf16 = c.speeds.bf16_tflops >= c.speeds.fp32_tflops;
  std::snprintf(buf, sizeof buf, "bf16 GEMMs %.3g TFLOP/s %s fp32 %.3g at the model's shapes%s",
                c.speeds.bf16_tflops, bf16 ? ">=" : "<", c.speeds.fp32_tflops,
                c.speeds.cached ? ", measured earlier on this CPU" : "");
  c.dtype = bf16 ? DType::BF16 : DType::F32;
  c.reason = buf;
  return c;
}

}  // namespace moet
