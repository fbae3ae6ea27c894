// E2M1, the 4-bit element format of NVFP4 and MXFP4 (OCP Microscaling v1.0 "FP4"): sign, 2
// exponent bits (bias 1), 1 mantissa bit; no infinities or NaN. Magnitudes 0, 0.5, 1, 1.5, 2, 3,
// 4, 6 (codes 0..7; bit 3 is the sign). Conversion as CUDA's cvt.rn.satfinite.e2m1: round to
// nearest, ties to even; beyond ±6 (and ±Inf) saturate to ±6; NaN becomes +6.
// Stochastic rounding as cvt.rs.satfinite.e2m1 (8 random bits per element, Transformer Engine's
// stochastic_round_fp4_e2m1).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace moet {

constexpr float kE2M1Max = 6.0f;

// The E2M1 magnitude nearest to a >= 0 (ties to even), saturated to 6, NaN to 6; branch-free, so
// loops over it vectorise.
inline float e2m1_round_abs(float a) {
  const uint32_t ab = std::bit_cast<uint32_t>(a);
  // [1, 6]: the fp32 mantissa rounded to 1 bit (ties to even)
  const float normal = std::bit_cast<float>((ab + 0x1FFFFFu + ((ab >> 22) & 1u)) & 0xFFC00000u);
  // [0, 1): a multiple of 0.5, by adding 2^22 (whose fp32 ulp is 0.5); 1.0 is the code after 0.5
  const float sub = (a + 4194304.0f) - 4194304.0f;
  const float v = a < 1.0f ? sub : normal;
  return ab > 0x7F800000u ? kE2M1Max : (v > kE2M1Max ? kE2M1Max : v);
}

// The signed E2M1 value of y (round to nearest even, satfinite; NaN -> +6).
inline float e2m1_round(float y) {
  const uint32_t yb = std::bit_cast<uint32_t>(y);
  const float v = e2m1_round_abs(std::bit_cast<float>(yb & 0x7FFFFFFFu));
  const uint32_t sign = (yb & 0x7FFFFFFFu) > 0x7F800000u ? 0u : (yb & 0x80000000u);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
}

// Stochastic rounding of y onto the E2M1 grid with 8 random bits r (low byte used), as
// cvt.rs.satfinite.e2m1x4.f32 and Transformer Engine's software equivalent: with a = |y| and
// step the grid spacing at a (0.5 below 2, 1 below 4, else 2), t = fma(r/256, step, a) is
// floored onto the grid at t, saturated to 6; the sign is y's (NaN -> +6). P(round up) is
// (number of r in 0..255 with t reaching the upper neighbour) / 256 — floor(256·f)/256 for a at
// fraction f of the way, up to fp32's rounding of t.
inline float e2m1_stochastic(float y, uint32_t r) {
  const uint32_t yb = std::bit_cast<uint32_t>(y), ab = yb & 0x7FFFFFFFu;
  const float a = std::bit_cast<float>(ab);
  const float u = float(r & 0xFFu) * (1.0f / 256.0f);
  const float step = a >= 4.0f ? 2.0f : (a >= 2.0f ? 1.0f : 0.5f);
  const float t = std::fma(u, step, a);
  const float step_t = t >= 4.0f ? 2.0f : (t >= 2.0f ? 1.0f : 0.5f);
  const float inv_t = t >= 4.0f ? 0.5f : (t >= 2.0f ? 1.0f : 2.0f);
  float q = std::floor(t * inv_t) * step_t;
  q = q > kE2M1Max ? kE2M1Max : q;
  const float signed_q = std::bit_cast<float>(std::bit_cast<uint32_t>(q) | (yb & 0x80000000u));
  return ab > 0x7F800000u ? kE2M1Max : signed_q;
}

// E2M1 code (0..15, bit 3 the sign) of an E2M1 value v (as e2m1_round returns).
inline uint8_t e2m1_code(float v) {
  const uint32_t vb = std::bit_cast<uint32_t>(v), ab = vb & 0x7FFFFFFFu;
  const uint32_t sign = (vb >> 28) & 8u;
  const float a = std::bit_cast<float>(ab);
  // below 1: 0 or 0.5 -> codes 0, 1; from 1: exponent (1..3) and the mantissa's top bit
  const uint32_t code =
      a < 1.0f ? uint32_t(a * 2.0f) : ((((ab >> 23) - 126u) << 1) | ((ab >> 22) & 1u));
  return uint8_t(code | sign);
}

inline float e2m1_to_float(uint8_t c) {
  constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (c & 8u) ? -kMag[c & 7u] : kMag[c & 7u];
}

}  // namespace moet
