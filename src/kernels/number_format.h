// Number formats of GEMM operands: the formats a linear layer's three GEMMs (fprop, dgrad, wgrad)
// may take their operands in, and the block layouts of the FP8 recipes. Kernels quantize; the
// model only says which format each GEMM wants (model/recipe.h, docs/precision.md).
#pragma once
#include <cstdint>
#include <string>

namespace moet::ops {

enum class Format : uint8_t {
  F32,       // fp32 operands
  BF16,      // operands rounded to bf16 (nearest, ties to even)
  MXFP8,     // E4M3 elements, one E8M0 scale per 32 consecutive elements of the reduction dim
  FP8Block,  // E4M3 elements, fp32 power-of-two scales: 1×128 tiles (activations, gradients),
             // 128×128 blocks (weights) — the DeepSeek-V3 recipe
};

const char* format_name(Format f);
inline bool is_fp8(Format f) { return f == Format::MXFP8 || f == Format::FP8Block; }

// Elements per block along the reduction dimension (1 for the element-wise formats).
inline int64_t format_block(Format f) {
  return f == Format::MXFP8 ? 32 : f == Format::FP8Block ? 128 : 1;
}

// The formats of one linear layer's GEMMs: fprop y = x·Wᵀ, dgrad dx = dy·W, wgrad dW = dyᵀ·x.
struct LinearPrecision {
  Format fprop = Format::F32, dgrad = Format::F32, wgrad = Format::F32;
  static LinearPrecision all(Format f) { return {f, f, f}; }
  bool is_f32() const {
    return fprop == Format::F32 && dgrad == Format::F32 && wgrad == Format::F32;
  }
};

// Where a quantizer's blocks lie in a row-major [R, C] tensor.
enum class BlockAxis : uint8_t {
  Rows,    // 1×b: b consecutive elements of a row (reduction over columns)
  Cols,    // b×1: b consecutive rows of a column (reduction over rows)
  Square,  // b×b (FP8Block weights; serves both directions)
};

}  // namespace moet::ops
