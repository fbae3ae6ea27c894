// Number formats of GEMM operands: the formats a linear layer's three GEMMs (fprop, dgrad, wgrad)
// may take their operands in, and the block layouts of the FP8 recipes. Kernels quantize; the
// model only says which format each GEMM wants (model/recipe.h, docs/precision.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/enum_table.h"

namespace moet::ops {

enum class Format : uint8_t {
  F32,       // fp32 operands
  BF16,      // operands rounded to bf16 (nearest, ties to even)
  MXFP8,     // E4M3 elements, one E8M0 scale per 32 consecutive elements of the reduction dim
  FP8Block,  // E4M3 elements, fp32 power-of-two scales: 1×128 tiles (activations, gradients),
             // 128×128 blocks (weights) — the DeepSeek-V3 recipe
  NVFP4,  // E2M1 elements, one E4M3 decode scale per 16 (1×16, 16×1 or 16×16 blocks), one fp32
          // global scale per tensor (Transformer Engine's NVFP4BlockScaling)
  MXFP4,  // E2M1 elements, one E8M0 scale per 32 consecutive elements (OCP MX FP4)
};

// What each format is, one row per Format in the enum's order (as ggml's type-traits table):
// a new format is a row here and a quantizer in kernels/cpu/.
struct FormatTraits {
  Format format;
  const char* name;       // in logs and errors; the simulator's catalog keys its peaks by it
  int64_t block;          // elements per block along the reduction dimension (1: element-wise)
  bool fp8;               // E4M3 codes with per-block scales
  bool fp4;               // E2M1 codes with per-block scales (ops::quantize_fp4)
  const char* quantizer;  // the op profiler's name of the op that writes it (OpScope)
};

// format, name, block, FP8, FP4, quantizer
inline constexpr FormatTraits kFormats[] = {
    {Format::F32, "fp32", 1, false, false, "copy/add"},
    {Format::BF16, "bf16", 1, false, false, "quantize bf16"},
    {Format::MXFP8, "mxfp8", 32, true, false, "quantize mxfp8"},
    {Format::FP8Block, "fp8-blockwise", 128, true, false, "quantize fp8-blockwise"},
    {Format::NVFP4, "nvfp4", 16, false, true, "quantize nvfp4"},
    {Format::MXFP4, "mxfp4", 32, false, true, "quantize mxfp4"},
};

constexpr const FormatTraits& format_traits(Format f) { return kFormats[static_cast<size_t>(f)]; }
static_assert(rows_in_enum_order(kFormats, &FormatTraits::format),
              "kFormats: one row per Format, in the enum's order");

inline const char* format_name(Format f) { return format_traits(f).name; }
inline bool is_fp8(Format f) { return format_traits(f).fp8; }
// NVFP4 and MXFP4: quantized by ops::quantize_fp4 (kernels/cpu/fp4_operands.h forms the GEMMs'
// operands; the operand producers and ops::quantize refuse them).
inline bool is_fp4(Format f) { return format_traits(f).fp4; }
// Elements per block along the reduction dimension (1 for the element-wise formats).
inline int64_t format_block(Format f) { return format_traits(f).block; }

// The formats of one linear layer's GEMMs: fprop y = x·Wᵀ, dgrad dx = dy·W, wgrad dW = dyᵀ·x.
struct LinearPrecision {
  Format fprop = Format::F32, dgrad = Format::F32, wgrad = Format::F32;
  static constexpr LinearPrecision all(Format f) { return {f, f, f}; }
  bool is_f32() const {
    return fprop == Format::F32 && dgrad == Format::F32 && wgrad == Format::F32;
  }
};

// Where a quantizer's blocks lie in a row-major [R, C] tensor.
enum class BlockAxis : uint8_t {
  Rows,    // 1×b: b consecutive elements of a row (reduction over columns)
  Cols,    // b×1: b consecutive rows of a column (reduction over rows)
  Square,  // b×b (FP8Block and NVFP4 weights; serves both directions)
};

}  // namespace moet::ops
