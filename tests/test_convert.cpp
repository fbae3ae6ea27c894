// test_convert.cpp — the vectorised fp32 ⇄ bf16 conversions (kernels/cpu/convert.h) against
// core/bf16.h's scalar definition, bit for bit: every bf16 upper half with the lower halves that
// decide rounding (ties, just above and below, NaN payloads, subnormals), at every length and
// offset so both the vector body and the scalar tail run. The path this build takes is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "kernels/cpu/convert.h"
#include "kernels/ops.h"

namespace {

using namespace moet;

// Every upper half 0x0000..0xFFFF with lower halves 0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF and one
// random: NaNs (quiet and signalling, both signs), infinities, subnormals, zeros, ties.
std::vector<float> edge_values() {
  std::mt19937 g(7);
  std::vector<float> v;
  for (uint32_t hi = 0; hi <= 0xFFFF; ++hi)
    for (uint32_t lo : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, uint32_t(g() & 0xFFFF)})
      v.push_back(std::bit_cast<float>((hi << 16) | lo));
  std::shuffle(v.begin(), v.end(), g);  // subnormals and NaNs next to normal lanes
  return v;
}

TEST(Convert, PrintsThePath) {
  std::cout << "conversions use " << ops::cpu::convert_isa() << "\n";
  SUCCEED();
}

TEST(Convert, F32ToBf16IsTheScalarDefinition) {
  const std::vector<float> x = edge_values();
  std::vector<uint16_t> y(x.size());
  ops::cpu::f32_to_bf16(x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], bf16_bits(x[i])) << std::hex << std::bit_cast<uint32_t>(x[i]);
}

TEST(Convert, RoundInFp32IsTheScalarDefinition) {
  const std::vector<float> x = edge_values();
  std::vector<float> y(x.size()), z = x;
  ops::cpu::round_bf16_f32(x.data(), y.data(), int64_t(x.size()));
  ops::cpu::round_bf16_f32(z.data(), z.data(), int64_t(z.size()));  // in place
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(round_bf16(x[i]));
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), want) << std::hex << std::bit_cast<uint32_t>(x[i]);
    ASSERT_EQ(std::bit_cast<uint32_t>(z[i]), want);
  }
}

TEST(Convert, WideningIsExact) {
  std::vector<uint16_t> b(1 << 16);
  for (uint32_t i = 0; i < b.size(); ++i) b[i] = uint16_t(i);
  std::vector<float> y(b.size());
  ops::cpu::bf16_to_f32(b.data(), y.data(), int64_t(b.size()));
  for (uint32_t i = 0; i < b.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), i << 16);
}

// Lengths and offsets around the vector widths: the tails and unaligned starts are scalar or
// partial, and must not write past n.
TEST(Convert, EveryLengthAndOffset) {
  const std::vector<float> x = edge_values();
  for (int64_t off = 0; off < 17; ++off)
    for (int64_t n = 0; n < 70; ++n) {
      std::vector<uint16_t> y(size_t(n + 1), 0xABCD);
      std::vector<float> r(size_t(n + 1), -7.0f);
      std::vector<float> w(size_t(n + 1), -7.0f);
      std::vector<uint16_t> b(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) b[i] = uint16_t(std::bit_cast<uint32_t>(x[off + i]) >> 16);
      ops::cpu::f32_to_bf16(x.data() + off, y.data(), n);
      ops::cpu::round_bf16_f32(x.data() + off, r.data(), n);
      ops::cpu::bf16_to_f32(b.data(), w.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(y[i], bf16_bits(x[off + i]));
        ASSERT_EQ(std::bit_cast<uint32_t>(r[i]), std::bit_cast<uint32_t>(round_bf16(x[off + i])));
        ASSERT_EQ(std::bit_cast<uint32_t>(w[i]), uint32_t(b[i]) << 16);
      }
      ASSERT_EQ(y[n], 0xABCD) << "wrote past n=" << n;
      ASSERT_EQ(r[n], -7.0f);
      ASSERT_EQ(w[n], -7.0f);
    }
}

// The public quantize op takes the same path for BF16, into bf16 bits and into fp32 values,
// over many threads' ranges.
TEST(Convert, QuantizeBf16UsesTheSameRounding) {
  std::vector<float> x = edge_values();
  const int64_t n = int64_t(x.size()) / 64 * 64;
  std::vector<uint16_t> b(n);
  std::vector<float> f(n);
  Tensor xt(x.data(), DType::F32, {n / 64, 64}), bt(b.data(), DType::BF16, {n / 64, 64}),
      ft(f.data(), DType::F32, {n / 64, 64});
  ops::quantize(xt, ops::Format::BF16, ops::BlockAxis::Rows, bt);
  ops::quantize(xt, ops::Format::BF16, ops::BlockAxis::Rows, ft);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], bf16_bits(x[i]));
    ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(round_bf16(x[i])));
  }
}

}  // namespace
