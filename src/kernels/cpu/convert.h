// convert.h — fp32 ⇄ bf16 over arrays at memory speed, with the instructions this build's CPU
// has: AVX512_BF16's vcvtneps2bf16, AVX-512 or AVX2 integer rounding, or plain C++. Every path
// gives bit for bit what core/bf16.h's scalar definition gives (round to nearest, ties to even;
// NaN stays a quiet NaN with its sign and upper payload; subnormals are rounded, never flushed).
#pragma once
#include <cstdint>

namespace moet::ops::cpu {

// y[i] = bf16_bits(x[i]), i < n.
void f32_to_bf16(const float* x, uint16_t* y, int64_t n);
// y[i] = round_bf16(x[i]) as an fp32 (y may be x).
void round_bf16_f32(const float* x, float* y, int64_t n);
// y[i] = bf16_to_float(x[i]).
void bf16_to_f32(const uint16_t* x, float* y, int64_t n);

// The instructions the conversions use in this build: "AVX512_BF16", "AVX-512", "AVX2" or
// "scalar".
const char* convert_isa();

}  // namespace moet::ops::cpu
