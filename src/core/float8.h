// The 8-bit formats of the FP8 recipes (OCP 8-bit floating point and Microscaling v1.0):
// - E4M3 ("E4M3FN"): sign, 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN =
//   S.1111.111, largest finite 448, smallest subnormal 2^-9.
// - E8M0: an unsigned power of two 2^(e - 127), e = 0..254; e = 255 is NaN. MXFP8's block scale.
// Encoding rounds to nearest, ties to even, and saturates (out-of-range finite values and
// infinities become ±448, as CUDA's satfinite conversion); NaN becomes 0x7F.
#pragma once
#include <bit>
#include <cstdint>

namespace moet {

constexpr float kE4M3Max = 448.0f;

// Branch-free, so loops over it vectorise.
inline uint8_t e4m3_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a_bits = u & 0x7FFFFFFFu;
  const float a = std::bit_cast<float>(a_bits);
  // normal range: round the fp32 mantissa to 3 bits, re-bias the exponent (127 -> 7)
  const uint32_t r = a_bits + 0x7FFFFu + ((a_bits >> 20) & 1u);
  const int32_t normal = int32_t(r >> 20) - ((127 - 7) << 3);
  // subnormal range (below 2^-6): round to a multiple of 2^-9 by adding 2^14, whose fp32 ulp
  // is 2^-9; a result of 8 is the smallest normal, code 0x08, as it should be
  const float s = (a + 16384.0f) - 16384.0f;
  const int32_t sub = int32_t(s * 512.0f);
  int32_t code = a < 0.015625f ? sub : normal;
  code = code > 0x7E ? 0x7E : code;  // saturate (includes infinity)
  const bool nan = a_bits > 0x7F800000u;
  return nan ? uint8_t(0x7F) : uint8_t(uint32_t(code) | sign);
}

// The E4M3 value nearest to a >= 0 (ties to even), saturated to 448, as an fp32: what
// e4m3_to_float(e4m3_bits(a)) gives, without the round trip (a must not be NaN).
inline float e4m3_round_abs(float a) {
  const uint32_t a_bits = std::bit_cast<uint32_t>(a);
  const uint32_t r = (a_bits + 0x7FFFFu + ((a_bits >> 20) & 1u)) & 0xFFF00000u;
  const float normal = std::bit_cast<float>(r);
  const float sub = (a + 16384.0f) - 16384.0f;
  const float v = a < 0.015625f ? sub : normal;
  return v > kE4M3Max ? kE4M3Max : v;
}

inline float e4m3_to_float(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
  if (e == 0xF && m == 7) return std::bit_cast<float>(0x7FC00000u | sign);
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(m) * 0.001953125f));
  return std::bit_cast<float>(sign | ((e + 120u) << 23) | (m << 20));
}

inline float e8m0_to_float(uint8_t e) {
  if (e == 0xFF) return std::bit_cast<float>(0x7FC00000u);
  if (e == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, an fp32 subnormal
  return std::bit_cast<float>(uint32_t(e) << 23);
}

}  // namespace moet
