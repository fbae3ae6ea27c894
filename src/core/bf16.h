// bf16: the upper 16 bits of an IEEE fp32. Conversions round to nearest, ties to even; NaN
// stays NaN (quiet). A bf16 value widened back to fp32 is exact.
#pragma once
#include <bit>
#include <cstdint>

namespace moet {

// Branch-free (a select), so loops over it vectorise.
inline uint16_t bf16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7FFFFFFFu) > 0x7F800000u ? (u >> 16) | 0x40u : rounded);  // NaN quiet
}

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// x rounded to the nearest bf16 value, as an fp32.
inline float round_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

}  // namespace moet
