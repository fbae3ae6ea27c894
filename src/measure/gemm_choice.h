// Which GEMMs a recipe's low-precision operands go through on this machine: bf16 GEMMs, or fp32
// sgemm on the same values (bf16 and FP8 values are exact in fp32, their products too, and both
// sum in fp32: docs/precision.md). Having bf16 instructions does not make bf16 GEMMs faster (an
// Intel Xeon without AMX runs them at half the fp32 speed), so the choice is measured: both
// GEMMs at the model's shapes on the run's thread count, once per CPU model, oneDNN version,
// thread count and shape, cached in moet's cache directory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace moet {

// The GEMM shapes that stand for a model's linear layers: C[m, n] = A[m, k] · B[n, k]ᵀ.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};

struct GemmSpeeds {
  double fp32_tflops = 0, bf16_tflops = 0;  // over all the shapes
  bool cached = false;                      // read from the cache, not measured now
};

// A model's shapes for `tokens` rows: its dense MLP's gate-up projection, a routed expert's (the
// tokens it gets when routing is even) and the LM head.
std::vector<GemmShape> model_gemm_shapes(const ModelConfig& cfg, int64_t tokens);

// bf16 and fp32 GEMM throughput over `shapes` on the current thread count (ops::num_threads()),
// from the cache when it holds them, else measured (a fraction of a second) and cached.
GemmSpeeds gemm_speeds(const std::vector<GemmShape>& shapes);

struct GemmOperandChoice {
  DType dtype = DType::F32;
  std::string reason;  // one line: why (the header prints it)
  GemmSpeeds speeds;   // zero when nothing was measured
};

// The operand store for low-precision operands here: F32 without bf16 instructions; else BF16
// where bf16 GEMMs are the faster at `shapes`, F32 where fp32 are; `recorded` ("bf16", "fp32")
// keeps a resumed run's store, so it continues bit for bit. Does not apply it.
GemmOperandChoice choose_gemm_operands(const std::vector<GemmShape>& shapes,
                                       const std::string& recorded);

// "bf16" or "fp32": how a run records the store it used.
const char* gemm_operands_name(DType dtype);

}  // namespace moet
