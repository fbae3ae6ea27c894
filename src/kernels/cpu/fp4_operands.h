// fp4_operands.h — private helpers of the GEMM ops for the 4-bit formats (NVFP4, MXFP4): the
// operands of a linear layer's three GEMMs as the recipes nvfp4 and mxfp4 form them
// (docs/precision.md, "Training in NVFP4"), quantized by ops::quantize_fp4.
#pragma once
#include "kernels/cpu/operands.h"

namespace moet::ops::cpu {

// Which operand of a linear layer's GEMMs: that decides its blocks, rounding and transform.
enum class Fp4Role : uint8_t {
  FpropX,   // x of fprop: 1×b blocks along the input dim, nearest-even
  DgradDy,  // dy of dgrad: 1×b blocks along the output dim, stochastic
  WgradDy,  // dy of wgrad: b×1 blocks along the tokens, stochastic; NVFP4: transformed first
  WgradX,   // x of wgrad: b×1 blocks along the tokens, nearest-even; NVFP4: transformed first
};

// A tensor's identity in the step's random streams: its layer's weight (WeightOperands::key)
// and a fingerprint (CRC-32C) of the rows the layer read in forward — the same bits under every
// parallel layout under --deterministic, where a tensor is one sequence's (or one expert's rows
// of one sequence). The fingerprint is of the rows' fp32 values, so BF16 bits (expert rows that
// travelled as bf16) and their fp32 widening give the same key.
struct Fp4Key {
  uint64_t weight = 0;
  uint32_t rows = 0;
};
Fp4Key fp4_key(const WeightOperands* wq, const void* x, DType dtype, int64_t n);

// Rows a wgrad operand of r token rows takes: r rounded up to 16 (the transform mixes 16 rows;
// the added rows are zero in both operands, so the product is that of the unpadded ones).
inline int64_t fp4_wgrad_rows(int64_t r) { return (r + 15) / 16 * 16; }

// The operand of `role` from r rows of src (F32, or BF16 bits, C columns) into out (the operand
// dtype): r rows for FpropX and DgradDy, fp4_wgrad_rows(r) for the wgrad roles. Returns the amax
// its NVFP4 global scale came from (0 under MXFP4, which has none). prescale multiplies the rows
// first (a dispatched FP4 segment's global decode scale: its values dequantized).
float fp4_operand(const void* src, DType src_dtype, int64_t r, int64_t C, Format f, Fp4Role role,
                  const Fp4Key& key, void* out, float prescale = 1.0f);

// The factor a GEMM of two operands in f multiplies its fp32 sum by: NVFP4's
// nvfp4_gemm_alpha(amax_a, amax_b), 1 under MXFP4.
inline float fp4_alpha(Format f, float amax_a, float amax_b) {
  return f == Format::NVFP4 ? nvfp4_gemm_alpha(amax_a, amax_b) : 1.0f;
}

// prepare_weight's part for an FP4 precision p: each expert's [O, D] matrix quantized on its
// own — NVFP4 in 16×16 squares (one copy serves fprop and dgrad), MXFP4 as rows (fprop) and cols
// (dgrad) — and its amax kept in wq.amax.
void fp4_prepare_weight(const Tensor& w_EOD, const LinearPrecision& p, WeightOperands& wq);

// The experts' (E = 1: the matrix's) weight operand of fprop or dgrad: prepared (wq), or made
// now in scratch; amax[e] is expert e's.
struct Fp4Weight {
  Tensor values;
  const float* amax = nullptr;
};
Fp4Weight fp4_weight(const Tensor& w_EOD, int64_t E, int64_t O, int64_t D, Format f, bool dgrad,
                     const WeightOperands* wq);

}  // namespace moet::ops::cpu
