// convert.cpp — the bf16 conversions of convert.h. The vector paths compute core/bf16.h's
// rounding on integer lanes: (u + 0x7FFF + bit 16 of u) >> 16, and a NaN input keeps its upper
// half with the quiet bit set. AVX512_BF16's vcvtneps2bf16 rounds the same way except that it
// flushes subnormal inputs to zero, so a vector holding a subnormal takes the integer path.
#include "kernels/cpu/convert.h"

// GCC 12's AVX-512 intrinsics start their "undefined" pass-through operands as `__Y = __Y`,
// which -Wmaybe-uninitialized reports in every function they are inlined into.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/bf16.h"

namespace moet::ops::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
using VecI = __m512i;

inline VecI load(const float* p) { return _mm512_loadu_si512(p); }
// The rounded bf16 of each lane, in the upper 16 bits (lower 16 bits zero).
inline VecI rounded_high(VecI u) {
  const VecI lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const VecI r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
  const VecI even = _mm512_and_si512(r, _mm512_set1_epi32(int32_t(0xFFFF0000u)));
  const VecI quiet = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(int32_t(0xFFFF0000u))),
                                     _mm512_set1_epi32(0x00400000));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_blend_epi32(nan, even, quiet);
}
inline void store_f32(float* p, VecI v) { _mm512_storeu_si512(p, v); }
inline void store_bf16(uint16_t* p, VecI high) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtepi32_epi16(_mm512_srli_epi32(high, 16)));
}
inline void widen(const uint16_t* p, float* y) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  _mm512_storeu_si512(y, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#elif defined(__AVX2__)
constexpr int64_t kLanes = 8;
using VecI = __m256i;

inline VecI load(const float* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VecI rounded_high(VecI u) {
  const VecI lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const VecI r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
  const VecI even = _mm256_and_si256(r, _mm256_set1_epi32(int32_t(0xFFFF0000u)));
  const VecI quiet = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(int32_t(0xFFFF0000u))),
                                     _mm256_set1_epi32(0x00400000));
  // |u| > +Inf as signed 32-bit integers: both are non-negative
  const VecI nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                      _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(even, quiet, nan);
}
inline void store_f32(float* p, VecI v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
// Two vectors of 8 at once: packus works within 128-bit halves, the permute restores the order.
inline void store_bf16_pair(uint16_t* p, VecI high_a, VecI high_b) {
  const VecI packed =
      _mm256_packus_epi32(_mm256_srli_epi32(high_a, 16), _mm256_srli_epi32(high_b, 16));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
}
inline void widen(const uint16_t* p, float* y) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y),
                      _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#else
constexpr int64_t kLanes = 0;
#endif

#if defined(__AVX512BF16__) && defined(__AVX512F__)
// Lanes holding a subnormal (exponent 0, mantissa not 0): vcvtneps2bf16 would flush them.
inline __mmask16 subnormal_lanes(__m512i u) {
  return _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000)) &
         _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007FFFFF));
}
#endif

}  // namespace

const char* convert_isa() {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  return "AVX512_BF16";
#elif defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#else
  return "scalar";
#endif
}

void f32_to_bf16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + kLanes <= n; i += kLanes) {
    const VecI u = load(x + i);
#if defined(__AVX512BF16__)
    if (subnormal_lanes(u) == 0) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_castsi512_ps(u));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), reinterpret_cast<const __m256i&>(h));
      continue;
    }
#endif
    store_bf16(y + i, rounded_high(u));
  }
#elif defined(__AVX2__)
  for (; i + 2 * kLanes <= n; i += 2 * kLanes)
    store_bf16_pair(y + i, rounded_high(load(x + i)), rounded_high(load(x + i + kLanes)));
#endif
  for (; i < n; ++i) y[i] = bf16_bits(x[i]);
}

void round_bf16_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  for (; i + kLanes <= n; i += kLanes) store_f32(y + i, rounded_high(load(x + i)));
#endif
  for (; i < n; ++i) y[i] = round_bf16(x[i]);
}

void bf16_to_f32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  for (; i + kLanes <= n; i += kLanes) widen(x + i, y + i);
#endif
  for (; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

}  // namespace moet::ops::cpu
