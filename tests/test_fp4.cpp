// test_fp4.cpp — the 4-bit formats (NVFP4, MXFP4; kernels/cpu/fp4_quantize.cpp): E2M1 rounding,
// Transformer Engine's scale rules on hand-worked blocks, partial blocks as zero padding, column
// blocks as row blocks of the transpose, square weights serving both directions, thread-count
// and split invariance, stochastic rounding's distribution, the random Hadamard transform's
// orthogonality, and the GEMM identity with TE's alpha.
// (Bit for bit against a TE-formula reference and torchao: reference/fp4_check.py.)
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "core/float4.h"
#include "core/rng.h"
#include "kernels/ops.h"

namespace {

using namespace moet;
using ops::BlockAxis;
using ops::Format;

// Normal values times 2^uniform(-spread_log2, spread_log2), from the project's counter-based RNG.
std::vector<float> randn(int64_t n, uint64_t seed, double spread_log2 = 0) {
  const CounterRng g(seed, 0);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = float(g.normal(2 * i) * std::exp2(spread_log2 * (2 * g.uniform(2 * i + 1) - 1)));
  return v;
}

// Everything one quantization writes.
struct Q {
  std::vector<float> values, codes, scales;
  ops::Fp4Result res;
};

Q quant(std::vector<float>& x, int64_t R, int64_t C, Format f, BlockAxis a,
        const ops::Fp4Options& o = {}) {
  Tensor xt(x.data(), DType::F32, {R, C});
  Q q{std::vector<float>(R * C),
      std::vector<float>(R * C),
      std::vector<float>(ops::scale_count(xt, f, a)),
      {}};
  q.res = ops::quantize_fp4(
      xt, f, a,
      {Tensor(q.values.data(), DType::F32, {R, C}), Tensor(q.codes.data(), DType::F32, {R, C}),
       Tensor(q.scales.data(), DType::F32, {int64_t(q.scales.size())})},
      o);
  return q;
}

std::vector<float> transpose(const std::vector<float>& x, int64_t R, int64_t C) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t[c * R + r] = x[r * C + c];
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  return true;
}

TEST(E2M1, EveryCodeRoundTripsAndTiesGoToEven) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(uint8_t(c));
    EXPECT_EQ(e2m1_code(v), c) << c;
    EXPECT_EQ(std::bit_cast<uint32_t>(e2m1_round(v)), std::bit_cast<uint32_t>(v)) << c;
  }
  // {input, nearest-even E2M1}: ties between neighbours go to the even code
  const float cases[][2] = {{0.25f, 0.0f},   {0.2500001f, 0.5f}, {0.75f, 1.0f},  {1.25f, 1.0f},
                            {1.75f, 2.0f},   {2.5f, 2.0f},       {3.5f, 4.0f},   {5.0f, 4.0f},
                            {5.0001f, 6.0f}, {7.0f, 6.0f},       {-2.5f, -2.0f}, {-0.1f, -0.0f},
                            {1e30f, 6.0f},   {-INFINITY, -6.0f}, {1e-45f, 0.0f}};
  for (const auto& c : cases)
    EXPECT_EQ(std::bit_cast<uint32_t>(e2m1_round(c[0])), std::bit_cast<uint32_t>(c[1])) << c[0];
  EXPECT_EQ(e2m1_round(std::nanf("")), 6.0f);  // satfinite: NaN -> +max
  EXPECT_EQ(e2m1_round(-std::nanf("")), 6.0f);
}

// TE's formulas worked by hand on single blocks: {tensor amax (first block), second block amax,
// its decode scale}: g = 2688 / amax, dec = e4m3(block_amax · g / 6).
TEST(NVFP4, BlockScalesFollowTransformerEngine) {
  struct Case {
    float amax, block_amax, dec;
  } cases[] = {
      {2688, 6, 1},                          // g = 1: dec = block amax / 6
      {2688, 6 * 0.00390625f, 0.00390625f},  // 2^-8: an E4M3 subnormal, kept (torchao: 2^-6)
      {2688, 6 * std::ldexp(1.0f, -11), 0},  // below half the smallest subnormal: 0
      {2688, 6 * 1.0625f, 1.0f},  // E4M3 tie 1.0625 -> 1 (even); x·enc beyond 6 saturates
      {6, 6, 448},                // the amax block always gets 448
      {96, 12, 56},               // g = 28: 12·28/6 = 56
  };
  for (const Case& c : cases) {
    std::vector<float> x(32, 0.0f);
    x[0] = c.amax;
    for (int j = 16; j < 32; ++j) x[j] = c.block_amax * float(j - 15) / 16.0f;
    const Q q = quant(x, 1, 32, Format::NVFP4, BlockAxis::Rows);
    EXPECT_EQ(q.res.amax, c.amax);
    EXPECT_EQ(q.res.global_scale, 2688.0f / c.amax);
    EXPECT_EQ(q.scales[1], c.dec) << c.amax << " " << c.block_amax;
    const float enc = std::min(1.0f / (c.dec * (1.0f / q.res.global_scale)), FLT_MAX);
    for (int j = 16; j < 32; ++j) {
      EXPECT_EQ(q.codes[j], e2m1_round(x[j] * enc)) << j;
      EXPECT_EQ(q.values[j], q.codes[j] * c.dec) << j;
    }
  }
  std::vector<float> z(48, 0.0f);
  const Q q = quant(z, 3, 16, Format::NVFP4, BlockAxis::Rows);  // amax 0: g = 1, all zeros
  EXPECT_EQ(q.res.global_scale, 1.0f);
  for (float v : q.values) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
}

// MXFP4: the E8M0 scale 2^ceil(log2(amax/6)) — nothing saturates — clamped to 2^±127.
TEST(MXFP4, ScaleIsAmaxOverSixRoundedUpToAPowerOfTwo) {
  const float cases[][2] = {{6, 1},
                            {6.0001f, 2},
                            {7, 2},
                            {12, 2},
                            {0.75f, 0.125f},
                            {0, std::ldexp(1.0f, -127)},
                            {1e-44f, std::ldexp(1.0f, -127)},
                            {FLT_MAX, std::ldexp(1.0f, 126)}};
  for (const auto& c : cases) {
    std::vector<float> x(32, 0.0f);
    x[5] = -c[0];
    const Q q = quant(x, 1, 32, Format::MXFP4, BlockAxis::Rows);
    EXPECT_EQ(q.scales[0], c[1]) << c[0];
    EXPECT_LE(std::fabs(q.codes[5]), 6.0f);
    EXPECT_EQ(q.codes[5], e2m1_round(-c[0] / c[1])) << c[0];
  }
}

// A last partial block quantizes as if the tensor were zero-padded; Cols blocks are the Rows
// blocks of the transpose; a square weight's two copies are one.
TEST(FP4, PartialBlocksTransposesAndSquares) {
  const int64_t R = 37, C = 45;
  std::vector<float> x = randn(R * C, 7, 12);
  for (Format f : {Format::NVFP4, Format::MXFP4})
    for (BlockAxis a : {BlockAxis::Rows, BlockAxis::Cols, BlockAxis::Square}) {
      if (f == Format::MXFP4 && a == BlockAxis::Square) continue;
      const int64_t b = ops::format_block(f), Rp = (R + b - 1) / b * b, Cp = (C + b - 1) / b * b;
      std::vector<float> xp(Rp * Cp, 0.0f);
      for (int64_t r = 0; r < R; ++r) std::copy_n(&x[r * C], C, &xp[r * Cp]);
      const Q q = quant(x, R, C, f, a), qp = quant(xp, Rp, Cp, f, a);
      std::vector<float> crop(R * C);
      for (int64_t r = 0; r < R; ++r) std::copy_n(&qp.values[r * Cp], C, &crop[r * C]);
      EXPECT_TRUE(same_bits(q.values, crop)) << ops::format_name(f) << " axis " << int(a);
      std::vector<float> xt = transpose(x, R, C);
      const BlockAxis ta = a == BlockAxis::Rows   ? BlockAxis::Cols
                           : a == BlockAxis::Cols ? BlockAxis::Rows
                                                  : BlockAxis::Square;
      const Q qt = quant(xt, C, R, f, ta);
      EXPECT_TRUE(same_bits(transpose(qt.values, C, R), q.values)) << ops::format_name(f);
      EXPECT_TRUE(same_bits(transpose(qt.codes, C, R), q.codes)) << ops::format_name(f);
    }
}

// Values are codes × scales, exact in bf16; thread count and a split over row ranges (the global
// amax given, stochastic rounding keyed by row0) change nothing.
TEST(FP4, ValuesExactInBf16AndInvariantToThreadsAndSplits) {
  const int64_t R = 64, C = 96;
  std::vector<float> x = randn(R * C, 11, 20);
  ops::Fp4Options o;
  o.stochastic = true, o.seed = 5, o.stream = stream_id({1, 2, 3});
  const int threads = ops::num_threads();
  ops::set_num_threads(1);
  const Q one = quant(x, R, C, Format::NVFP4, BlockAxis::Rows, o);
  ops::set_num_threads(std::max(2, threads));
  const Q many = quant(x, R, C, Format::NVFP4, BlockAxis::Rows, o);
  ops::set_num_threads(threads);
  EXPECT_TRUE(same_bits(one.values, many.values));
  EXPECT_TRUE(same_bits(one.codes, many.codes));
  for (int64_t i = 0; i < R * C; ++i) {
    EXPECT_EQ(one.values[i], one.codes[i] * one.scales[i / 16]) << i;
    EXPECT_EQ(round_bf16(one.values[i]), one.values[i]) << i;
  }
  Q parts[2];
  for (int h = 0; h < 2; ++h) {
    std::vector<float> xh(x.begin() + h * R / 2 * C, x.begin() + (h + 1) * R / 2 * C);
    ops::Fp4Options oh = o;
    oh.row0 = h * R / 2, oh.global_amax = one.res.amax;
    parts[h] = quant(xh, R / 2, C, Format::NVFP4, BlockAxis::Rows, oh);
  }
  parts[0].values.insert(parts[0].values.end(), parts[1].values.begin(), parts[1].values.end());
  EXPECT_TRUE(same_bits(parts[0].values, one.values));
  ops::Fp4Options other = o;
  other.seed = 6;
  EXPECT_FALSE(same_bits(quant(x, R, C, Format::NVFP4, BlockAxis::Rows, other).codes, one.codes));
}

// Stochastic rounding: each of the 256 random bytes rounds to a neighbour, up for floor(256·f) of
// them (f: the distance to the lower neighbour over the gap, as Blackwell's cvt.rs with 8 random
// bits); over many seeds the mean is the input (inputs on the 1/256 grid: unbiased exactly) and
// the frequency of rounding up is f, within 5 standard deviations.
TEST(FP4, StochasticRoundingIsUnbiasedWithTheDistancesAsProbabilities) {
  const float xs[] = {0.3046875f, 1.19921875f, 2.30078125f, -3.3046875f,
                      4.8984375f, 0.01171875f, 5.9921875f,  -0.5f};
  for (float x : xs) {
    const double a = std::fabs(x), step = a >= 4 ? 2 : a >= 2 ? 1 : 0.5;
    const double lo = std::floor(a / step) * step, f = (a - lo) / step;
    int up = 0;
    for (uint32_t r = 0; r < 256; ++r) {
      const float q = std::fabs(e2m1_stochastic(x, r));
      EXPECT_TRUE(q == float(lo) || q == float(lo + step)) << x << " " << r;
      up += q != float(lo);
    }
    EXPECT_EQ(up, int(std::floor(256 * f))) << x;
  }
  // the quantizer over seeds: block [6, xs...], the tensor amax 2688 in the next: g, dec, enc = 1
  std::vector<float> x(32, 0.0f);
  x[0] = 6, x[16] = 2688;
  for (int j = 0; j < 8; ++j) x[1 + j] = xs[j];
  const int kSeeds = 4000;
  std::vector<double> sum(8, 0.0), ups(8, 0.0);
  for (int s = 0; s < kSeeds; ++s) {
    ops::Fp4Options o;
    o.stochastic = true, o.seed = uint64_t(s), o.stream = 42;
    const Q q = quant(x, 1, 32, Format::NVFP4, BlockAxis::Rows, o);
    ASSERT_EQ(q.scales[0], 1.0f);
    for (int j = 0; j < 8; ++j) {
      sum[j] += q.values[1 + j];
      ups[j] += std::fabs(q.values[1 + j]) > std::fabs(xs[j]);
    }
  }
  for (int j = 0; j < 8; ++j) {
    const double a = std::fabs(xs[j]), step = a >= 4 ? 2 : a >= 2 ? 1 : 0.5;
    const double f = (a - std::floor(a / step) * step) / step;
    const double sd = step * std::sqrt(f * (1 - f) / kSeeds) + 1e-12;
    EXPECT_NEAR(sum[j] / kSeeds, xs[j], 5 * sd) << xs[j];
    EXPECT_NEAR(ups[j] / kSeeds, f, 5 * sd / step + 1e-12) << xs[j];
  }
}

// The transform (diag(s)·H16)/4 is orthogonal, so applied along N to both wgrad operands it leaves
// dYᵀ·X unchanged (before quantization); the fp32 butterflies agree with the matrix.
TEST(FP4, HadamardIsOrthogonalAndKeepsTheWgradProduct) {
  std::vector<float> eye(256, 0.0f), m(256);
  for (int i = 0; i < 16; ++i) eye[i * 17] = 1;
  Tensor et(eye.data(), DType::F32, {16, 16}), mt(m.data(), DType::F32, {16, 16});
  ops::hadamard16(et, BlockAxis::Rows, nullptr, mt);  // row i: e_i·diag(s)·H/4
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double d = 0;
      for (int k = 0; k < 16; ++k) d += double(m[i * 16 + k]) * m[j * 16 + k];
      EXPECT_EQ(d, i == j ? 1.0 : 0.0) << i << "," << j;
      const int sylvester = (std::popcount(unsigned(i & j)) & 1) ? -1 : 1;
      EXPECT_EQ(m[i * 16 + j], 0.25f * ops::kHadamardSignsTE[i] * float(sylvester));
    }
  const int64_t N = 64, O = 24, D = 40;
  std::vector<float> dy = randn(N * O, 3), x = randn(N * D, 4), dyh(N * O), xh(N * D);
  Tensor dyt(dy.data(), DType::F32, {N, O}), xt(x.data(), DType::F32, {N, D});
  Tensor dyht(dyh.data(), DType::F32, {N, O}), xht(xh.data(), DType::F32, {N, D});
  ops::hadamard16(dyt, BlockAxis::Cols, nullptr, dyht);
  ops::hadamard16(xt, BlockAxis::Cols, nullptr, xht);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t d = 0; d < D; ++d) {
      double want = 0, got = 0, mag = 0;
      for (int64_t n = 0; n < N; ++n) {
        want += double(dy[n * O + o]) * x[n * D + d];
        got += double(dyh[n * O + o]) * xh[n * D + d];
        mag += std::fabs(double(dy[n * O + o]) * x[n * D + d]);
      }
      EXPECT_NEAR(got, want, 1e-6 * mag) << o << "," << d;
    }
  std::vector<float> bad(16 * 24);
  Tensor bt(bad.data(), DType::F32, {16, 24});
  ops::Fp4Options o;
  o.hadamard = true;
  EXPECT_THROW(ops::fp4_amax(bt, BlockAxis::Rows, o), Error);  // 24 is not a multiple of 16
}

// A GEMM of two NVFP4 operands (x in 1×16 rows, w in 16×16 squares), its fp32 sum scaled by TE's
// alpha, equals the exact product of the operands' values times alpha (float64) up to fp32
// accumulation — and the product of the dequantized operands (values / g) up to alpha's rounding.
TEST(FP4, GemmOfTwoOperandsWithAlphaIsTheDequantizedProduct) {
  const int64_t M = 48, N = 40, K = 200;
  std::vector<float> x = randn(M * K, 21, 3), w = randn(N * K, 22, 3);
  const Q qx = quant(x, M, K, Format::NVFP4, BlockAxis::Rows);
  const Q qw = quant(w, N, K, Format::NVFP4, BlockAxis::Square);
  std::vector<float> y(M * N);
  Tensor a(const_cast<float*>(qx.values.data()), DType::F32, {M, K});
  Tensor b(const_cast<float*>(qw.values.data()), DType::F32, {N, K});
  Tensor yt(y.data(), DType::F32, {M, N});
  ops::gemm(a, false, b, true, yt);
  const float alpha = ops::nvfp4_gemm_alpha(qx.res.amax, qw.res.amax);
  EXPECT_EQ(alpha, (qx.res.amax * qw.res.amax) / 7225344.0f);
  const double dq = 1.0 / (double(qx.res.global_scale) * qw.res.global_scale);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(qx.values[i * K + k]) * qw.values[j * K + k];
        exact += p, mag += std::fabs(p);
      }
      const double got = double(alpha * y[i * N + j]);
      EXPECT_NEAR(got, exact * alpha, (2 * K * 0x1p-24 * mag + 0x1p-23 * std::fabs(exact)) * alpha);
      EXPECT_NEAR(got, exact * dq,
                  (2 * K * 0x1p-24 * mag + 4 * 0x1p-23 * std::fabs(exact)) * alpha);
    }
}

TEST(FP4, QuantizeRefusesTheFormats) {
  std::vector<float> x(64, 1.0f), q(64);
  Tensor xt(x.data(), DType::F32, {4, 16}), qt(q.data(), DType::F32, {4, 16});
  EXPECT_THROW(ops::quantize(xt, Format::NVFP4, BlockAxis::Rows, qt), Error);
  EXPECT_THROW(quant(x, 4, 16, Format::MXFP4, BlockAxis::Square), Error);
  EXPECT_TRUE(ops::is_fp4(Format::NVFP4) && !ops::is_fp8(Format::NVFP4));
  EXPECT_EQ(ops::format_block(Format::NVFP4), 16);
  EXPECT_EQ(ops::format_block(Format::MXFP4), 32);
}

// The experts' FP4 tokens: quantize_fp4_segments quantizes each segment under its own amax, as
// quantize_fp4 does the segment alone; on the wire (encode_fp4_rows under that amax, then
// decode_rows) the rows come back as those values bit for bit, in D/2 + D/b bytes a row (an odd
// D and a partial block included).
TEST(FP4, ExpertSegmentsAndTheirWireRows) {
  for (Format f : {Format::NVFP4, Format::MXFP4}) {
    for (int64_t D : {int64_t(64), int64_t(45)}) {
      const int64_t M = 23, b = ops::format_block(f);
      const std::vector<int32_t> off = {0, 5, 5, 17, 23};  // an empty segment too
      std::vector<float> x = randn(M * D, 51, 24);
      for (int64_t i = 0; i < 5 * D; ++i) x[size_t(i)] *= 1e-3f;  // a segment far below the rest
      std::vector<float> q = x, amax(4, -1.0f);
      Tensor qt(q.data(), DType::F32, {M, D});
      ops::quantize_fp4_segments(qt, off.data(), 4, f, amax.data());
      EXPECT_EQ(ops::wire_row_bytes(D, f), (D + 1) / 2 + (D + b - 1) / b);
      std::vector<unsigned char> wire(size_t(M * ops::wire_row_bytes(D, f)));
      for (int64_t g = 0; g < 4; ++g) {
        const int64_t r0 = off[size_t(g)], r = off[size_t(g) + 1] - r0;
        std::vector<float> want(size_t(r * D));
        const ops::Fp4Result res = ops::quantize_fp4(
            Tensor(x.data() + r0 * D, DType::F32, {r, D}), f, BlockAxis::Rows,
            {.values = Tensor(want.data(), DType::F32, {r, D}), .codes = {}, .scales = {}});
        EXPECT_EQ(amax[size_t(g)], f == Format::NVFP4 && r > 0 ? res.amax : 0.0f);
        for (int64_t i = 0; i < r * D; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(q[size_t(r0 * D + i)]),
                    std::bit_cast<uint32_t>(want[size_t(i)]))
              << ops::format_name(f) << " segment " << g << " element " << i;
        ops::encode_fp4_rows(Tensor(x.data() + r0 * D, DType::F32, {r, D}), f, amax[size_t(g)],
                             wire.data() + r0 * ops::wire_row_bytes(D, f));
      }
      std::vector<float> back(size_t(M * D), -7.0f);
      Tensor bt(back.data(), DType::F32, {M, D});
      ops::decode_rows(wire.data(), f, bt);
      for (int64_t i = 0; i < M * D; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(back[size_t(i)]), std::bit_cast<uint32_t>(q[size_t(i)]))
            << ops::format_name(f) << " D " << D << " element " << i;
    }
  }
}

// The lane-parallel Philox that draws the stochastic rounding's bytes gives CounterRng's blocks,
// across a 2^32 boundary of the block index and for counts that are not a multiple of its lanes.
TEST(FP4, LaneParallelPhiloxIsCounterRngBlockByBlock) {
  const uint64_t seed = 0x0123456789ABCDEFull, stream = 0xFEDCBA9876543210ull;
  const CounterRng rng(seed, stream);
  for (uint64_t first : {uint64_t{0}, uint64_t{7}, (uint64_t{1} << 32) - 5}) {
    const int64_t n = 37;
    std::vector<uint32_t> words(size_t(4 * n));
    philox4x32_10_blocks(seed, stream, first, n, words.data());
    for (int64_t k = 0; k < n; ++k) {
      const auto b = rng.block(first + uint64_t(k));
      for (int w = 0; w < 4; ++w)
        EXPECT_EQ(words[size_t(4 * k + w)], b[size_t(w)]) << "block " << first + k;
    }
  }
}

// ---------------------------------------------------------------- the linear layers in FP4

Tensor view(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::F32, dims);
}

// ||a - b|| / ||b||
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += std::pow(double(a[i]) - b[i], 2), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

TEST(FP4Linear, ForwardIsTheQuantizedProductScaledByAlpha) {
  const int64_t N = 40, D = 48, O = 24;
  std::vector<float> x = randn(N * D, 31, 2), w = randn(O * D, 32, 2), y(N * O);
  for (Format f : {Format::NVFP4, Format::MXFP4}) {
    Tensor yt = view(y, {N, O});
    ops::linear_forward(view(x, {N, D}), view(w, {O, D}), yt,
                        {.precision = ops::LinearPrecision::all(f)});
    const Q qx = quant(x, N, D, f, BlockAxis::Rows);
    // NVFP4 weights in 16×16 squares, MXFP4's along the reduction dim
    const Q qw = quant(w, O, D, f, f == Format::NVFP4 ? BlockAxis::Square : BlockAxis::Rows);
    const double alpha =
        f == Format::NVFP4 ? double(ops::nvfp4_gemm_alpha(qx.res.amax, qw.res.amax)) : 1.0;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < O; ++j) {
        double exact = 0, mag = 0;
        for (int64_t k = 0; k < D; ++k) {
          const double p = double(qx.values[i * D + k]) * qw.values[j * D + k];
          exact += p, mag += std::fabs(p);
        }
        EXPECT_NEAR(y[i * O + j], alpha * exact, alpha * (4 * D * 0x1p-24 * mag) + 1e-30)
            << ops::format_name(f) << " y[" << i << "," << j << "]";
      }
  }
}

// Backward: dgrad rounds dy stochastically, wgrad transforms both operands along the tokens
// (40 rows: padded to 48) and rounds dy stochastically; the step decides the draws, so the same
// step repeats bit for bit and another step draws anew, while forward does not depend on it.
TEST(FP4Linear, BackwardTracksTheExactGradientsAndDrawsFromTheStep) {
  const int64_t N = 40, D = 48, O = 32;
  std::vector<float> x = randn(N * D, 41), w = randn(O * D, 42), dy = randn(N * O, 43);
  // the exact gradients
  std::vector<float> dx_exact(N * D), dw_exact(O * D, 0.0f);
  {
    Tensor dxt = view(dx_exact, {N, D}), dwt = view(dw_exact, {O, D});
    ops::linear_backward(view(dy, {N, O}), view(x, {N, D}), view(w, {O, D}), dxt, dwt);
  }
  for (Format f : {Format::NVFP4, Format::MXFP4}) {
    const ops::LinearOptions o{.precision = ops::LinearPrecision::all(f)};
    auto run = [&](int64_t step) {
      ops::set_fp4_step(7, step);
      std::vector<float> y(N * O), dx(N * D), dw(O * D, 0.0f);
      Tensor yt = view(y, {N, O}), dxt = view(dx, {N, D}), dwt = view(dw, {O, D});
      ops::linear_forward(view(x, {N, D}), view(w, {O, D}), yt, o);
      ops::linear_backward(view(dy, {N, O}), view(x, {N, D}), view(w, {O, D}), dxt, dwt, o);
      return std::vector<std::vector<float>>{y, dx, dw};
    };
    const auto a = run(1), again = run(1), b = run(2);
    const char* name = ops::format_name(f);
    EXPECT_TRUE(same_bits(a[0], b[0])) << name << ": forward drew from the step";
    EXPECT_TRUE(same_bits(a[1], again[1]) && same_bits(a[2], again[2])) << name;
    EXPECT_FALSE(same_bits(a[1], b[1])) << name << ": dgrad did not round stochastically";
    EXPECT_FALSE(same_bits(a[2], b[2])) << name << ": wgrad's draws did not change with the step";
    // 4-bit operands: each gradient within 25% of the exact one (a wrong alpha, block axis or
    // padding is off by far more)
    EXPECT_LT(rel_error(a[1], dx_exact), 0.25) << name;
    EXPECT_LT(rel_error(a[2], dw_exact), 0.25) << name;
    // NVFP4: the mean over 32 steps' draws comes closer to the exact weight gradient (each step's
    // signs make x's rounding error another one too; MXFP4 rounds x to nearest, the same error
    // every step)
    if (f != Format::NVFP4) continue;
    std::vector<float> mean(O * D, 0.0f);
    for (int64_t s = 0; s < 32; ++s) {
      const auto r = run(100 + s);
      for (int64_t i = 0; i < O * D; ++i) mean[size_t(i)] += r[2][size_t(i)] / 32.0f;
    }
    EXPECT_LT(rel_error(mean, dw_exact), 0.5 * rel_error(a[2], dw_exact)) << name;
  }
}

// The grouped layer quantizes each (expert, source) segment on its own: every segment's outputs
// and gradients equal the plain linear layer's on that segment's rows, bit for bit (the GEMMs cut
// into thread-invariant tiles, so both run the same products).
TEST(FP4Linear, GroupedSegmentsAreLinearLayersOfTheirOwn) {
  const int64_t D = 32, O = 48, E = 2;
  const std::vector<int32_t> off = {0, 21, 21 + 37};
  const int64_t M = off.back();
  std::vector<float> x = randn(M * D, 51, 1), w = randn(E * O * D, 52), dy = randn(M * O, 53);
  std::vector<int32_t> offv = off;
  const Tensor offt(offv.data(), DType::I32, {E + 1});
  ops::set_thread_invariant(true);
  ops::set_fp4_step(3, 9);
  for (Format f : {Format::NVFP4, Format::MXFP4}) {
    const ops::LinearPrecision p = ops::LinearPrecision::all(f);
    std::vector<float> y(M * O), dx(M * D), dw(E * O * D, 0.0f);
    Tensor yt = view(y, {M, O}), dxt = view(dx, {M, D}), dwt = view(dw, {E, O, D});
    ops::grouped_linear_forward(view(x, {M, D}), offt, view(w, {E, O, D}), yt, {.precision = p});
    ops::grouped_linear_backward(view(dy, {M, O}), view(x, {M, D}), offt, view(w, {E, O, D}), dxt,
                                 dwt, {.precision = p});
    for (int64_t e = 0; e < E; ++e) {
      const int64_t r0 = off[size_t(e)], r = off[size_t(e) + 1] - r0;
      std::vector<float> xs(x.begin() + r0 * D, x.begin() + (r0 + r) * D),
          dys(dy.begin() + r0 * O, dy.begin() + (r0 + r) * O),
          ws(w.begin() + e * O * D, w.begin() + (e + 1) * O * D), ys(r * O), dxs(r * D),
          dws(O * D, 0.0f);
      Tensor yst = view(ys, {r, O}), dxst = view(dxs, {r, D}), dwst = view(dws, {O, D});
      ops::linear_forward(view(xs, {r, D}), view(ws, {O, D}), yst, {.precision = p});
      ops::linear_backward(view(dys, {r, O}), view(xs, {r, D}), view(ws, {O, D}), dxst, dwst,
                           {.precision = p});
      const char* name = ops::format_name(f);
      EXPECT_TRUE(same_bits(ys, std::vector<float>(y.begin() + r0 * O, y.begin() + (r0 + r) * O)))
          << name << " expert " << e;
      EXPECT_TRUE(
          same_bits(dxs, std::vector<float>(dx.begin() + r0 * D, dx.begin() + (r0 + r) * D)))
          << name << " expert " << e;
      EXPECT_TRUE(
          same_bits(dws, std::vector<float>(dw.begin() + e * O * D, dw.begin() + (e + 1) * O * D)))
          << name << " expert " << e;
    }
  }
  ops::set_thread_invariant(false);
}

}  // namespace
