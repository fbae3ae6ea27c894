// test_quantize.cpp — the FP8 and bf16 number formats and the recipes' block quantizers
// (kernels/number_format.h): E4M3 rounding and saturation, Transformer Engine's scale rules,
// partial blocks as zero padding, packed and value forms agreeing, values exact in bf16,
// idempotence, and low-precision linear layers equal to exact products of the quantized operands.
// (Bit-for-bit against ml_dtypes: reference/quant_check.py.)
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/float8.h"
#include "kernels/ops.h"

namespace {

using namespace moet;
using ops::BlockAxis;
using ops::Format;

Tensor view(std::vector<float>& v, int64_t R, int64_t C) {
  return Tensor(v.data(), DType::F32, {R, C});
}

std::vector<float> randn(int64_t n, uint64_t seed, double spread_log2 = 0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<double> ud(-spread_log2, spread_log2);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(g) * float(std::exp2(ud(g)));
  return v;
}

std::vector<float> quantized(std::vector<float>& x, int64_t R, int64_t C, Format f, BlockAxis a) {
  std::vector<float> q(x.size());
  Tensor xt = view(x, R, C), qt = view(q, R, C);
  ops::quantize(xt, f, a, qt);
  return q;
}

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(e4m3_bits(v), c) << "code " << c << " value " << v;
    EXPECT_TRUE(same_bits(e4m3_round_abs(std::fabs(v)), std::fabs(v))) << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
}

TEST(E4M3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(e4m3_bits(1.0625f), 0x38);  // 1 + 1/16: tie between 1 and 1.125 -> even (1)
  EXPECT_EQ(e4m3_bits(1.1875f), 0x3A);  // tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(e4m3_bits(std::ldexp(1.0f, -10)), 0x00);      // half the smallest subnormal: to 0
  EXPECT_EQ(e4m3_bits(3 * std::ldexp(1.0f, -10)), 0x02);  // 1.5 ulp: tie -> even (2)
  EXPECT_EQ(e4m3_bits(464.0f), 0x7E);                     // tie between 448 and 480 -> 448
  EXPECT_EQ(e4m3_bits(465.0f), 0x7E);                     // saturates
  EXPECT_EQ(e4m3_bits(1e30f), 0x7E);
  EXPECT_EQ(e4m3_bits(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_bits(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(e4m3_bits(std::nanf("")), 0x7F);
  EXPECT_EQ(e4m3_bits(-0.0f), 0x80);
  // the largest subnormal rounds up into the smallest normal where it should
  EXPECT_EQ(e4m3_bits(std::ldexp(15.5f, -10)), 0x08);
}

TEST(E4M3, RoundAbsMatchesEncodeThenDecode) {
  std::vector<float> v = randn(20000, 1, 14);
  for (float x : v) {
    const float a = std::fabs(x);
    ASSERT_TRUE(same_bits(e4m3_round_abs(a), std::fabs(e4m3_to_float(e4m3_bits(a))))) << a;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_bits(std::nanf("")))));
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
}

// Scales of single blocks, by Transformer Engine's rules.
uint8_t mx_exponent(float amax) {
  std::vector<float> x(32, 0.0f), q(32);
  x[5] = amax;
  std::vector<uint8_t> codes(32), scales(1);
  Tensor xt = view(x, 1, 32), qt = view(q, 1, 32);
  Tensor ct(codes.data(), DType::U8, {1, 32}), st(scales.data(), DType::U8, {1});
  ops::quantize_packed(xt, Format::MXFP8, BlockAxis::Rows, ct, st, qt);
  return scales[0];
}

float block_scale(float amax) {
  std::vector<float> x(128, 0.0f), q(128), s(1);
  x[100] = -amax;
  std::vector<uint8_t> codes(128);
  Tensor xt = view(x, 1, 128), qt = view(q, 1, 128);
  Tensor ct(codes.data(), DType::U8, {1, 128}), st(s.data(), DType::F32, {1});
  ops::quantize_packed(xt, Format::FP8Block, BlockAxis::Rows, ct, st, qt);
  return s[0];
}

TEST(Quantize, MxScaleIsAmaxOver448RoundedUp) {
  EXPECT_EQ(mx_exponent(448.0f), 127);                        // 448 / 448 = 2^0
  EXPECT_EQ(mx_exponent(std::nextafter(448.0f, 1e9f)), 128);  // just over: 2^1
  EXPECT_EQ(mx_exponent(1.0f), 127 - 8);                      // 1/448 -> 2^-8
  EXPECT_EQ(mx_exponent(0.0f), 0);                            // all-zero block
  EXPECT_EQ(mx_exponent(std::numeric_limits<float>::infinity()), 0xFE);
}

TEST(Quantize, BlockScaleIs448OverAmaxRoundedDown) {
  EXPECT_EQ(block_scale(448.0f), 1.0f);         // scale 1
  EXPECT_EQ(block_scale(449.0f), 2.0f);         // 448/449 -> 2^-1: dequantisation scale 2
  EXPECT_EQ(block_scale(1.0f), 1.0f / 256.0f);  // 448 -> 256
  EXPECT_EQ(block_scale(0.0f), 1.0f);           // all-zero block: scale 1
  EXPECT_EQ(block_scale(1e-44f), std::ldexp(1.0f, -127));  // 448/amax overflows: FLT_MAX -> 2^127
}

TEST(Quantize, NothingOverflowsAndErrorsAreE4M3Rounding) {
  const int64_t R = 64, C = 256;
  for (Format f : {Format::MXFP8, Format::FP8Block}) {
    const int64_t b = ops::format_block(f);
    std::vector<float> x = randn(R * C, 2, 20);
    std::vector<float> q = quantized(x, R, C, f, BlockAxis::Rows);
    for (int64_t i = 0; i < R * C; ++i) {
      ASSERT_TRUE(std::isfinite(q[i]));
      // half an E4M3 ulp: 2^-4 relative for normals, 2^-10 of the block scale for subnormals;
      // the block scale is at most amax/224
      float amax = 0;
      const int64_t b0 = i / b * b;
      for (int64_t j = b0; j < b0 + b; ++j) amax = std::max(amax, std::fabs(x[j]));
      ASSERT_LE(std::fabs(q[i] - x[i]), std::fabs(x[i]) / 16 + amax / 224 / 1024) << i;
    }
  }
}

// A last partial block quantizes as the same tensor padded with zeros would.
TEST(Quantize, PartialBlocksAreZeroPadding) {
  const int64_t R = 70, C = 150, RP = 128, CP = 256;
  std::vector<float> x = randn(R * C, 3, 6), xp(RP * CP, 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) xp[r * CP + c] = x[r * C + c];
  for (Format f : {Format::MXFP8, Format::FP8Block})
    for (BlockAxis a : {BlockAxis::Rows, BlockAxis::Cols, BlockAxis::Square}) {
      if (f == Format::MXFP8 && a == BlockAxis::Square) continue;
      std::vector<float> q = quantized(x, R, C, f, a), qp = quantized(xp, RP, CP, f, a);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_TRUE(same_bits(q[r * C + c], qp[r * CP + c]))
              << ops::format_name(f) << " axis " << int(a) << " at " << r << "," << c;
    }
}

TEST(Quantize, ColumnBlocksAreRowBlocksOfTheTranspose) {
  const int64_t R = 96, C = 40;
  std::vector<float> x = randn(R * C, 4, 8), xt(R * C);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) xt[c * R + r] = x[r * C + c];
  for (Format f : {Format::MXFP8, Format::FP8Block}) {
    std::vector<float> q = quantized(x, R, C, f, BlockAxis::Cols);
    std::vector<float> qt = quantized(xt, C, R, f, BlockAxis::Rows);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) ASSERT_TRUE(same_bits(q[r * C + c], qt[c * R + r]));
  }
}

// codes × scales give the values; special inputs included.
TEST(Quantize, PackedFormGivesTheValues) {
  const int64_t R = 40, C = 300;
  std::vector<float> x = randn(R * C, 5, 30);
  x[7] = std::nanf("");
  x[400] = std::numeric_limits<float>::infinity();
  x[1000] = -std::numeric_limits<float>::infinity();
  for (int i = 2000; i < 2100; ++i) x[i] = std::ldexp(float(i - 2050), -140);  // subnormals
  for (int i = 3000; i < 3400; ++i) x[i] = 0.0f;
  for (Format f : {Format::MXFP8, Format::FP8Block})
    for (BlockAxis a : {BlockAxis::Rows, BlockAxis::Cols, BlockAxis::Square}) {
      if (f == Format::MXFP8 && a == BlockAxis::Square) continue;
      Tensor xt = view(x, R, C);
      const int64_t ns = ops::scale_count(xt, f, a);
      std::vector<uint8_t> codes(R * C), s8(ns);
      std::vector<float> s32(ns), q(R * C), d(R * C);
      Tensor ct(codes.data(), DType::U8, {R, C});
      Tensor st = f == Format::MXFP8 ? Tensor(s8.data(), DType::U8, {ns})
                                     : Tensor(s32.data(), DType::F32, {ns});
      Tensor qt = view(q, R, C), dt = view(d, R, C);
      ops::quantize_packed(xt, f, a, ct, st, qt);
      ops::dequantize(ct, st, f, a, dt);
      std::vector<float> q2 = quantized(x, R, C, f, a);
      for (int64_t i = 0; i < R * C; ++i) {
        ASSERT_TRUE(same_bits(q[i], d[i])) << ops::format_name(f) << " " << i;
        ASSERT_TRUE(same_bits(q[i], q2[i])) << i;
      }
      EXPECT_EQ(codes[7], 0x7F);  // NaN stays NaN
    }
}

// The argument of docs/precision.md: FP8 values (E4M3 × power-of-two scale) are bf16 values.
TEST(Quantize, Fp8ValuesAreExactInBf16) {
  const int64_t R = 64, C = 256;
  std::vector<float> x = randn(R * C, 6, 60);
  for (Format f : {Format::MXFP8, Format::FP8Block}) {
    std::vector<float> q = quantized(x, R, C, f, BlockAxis::Rows);
    std::vector<uint16_t> b(R * C);
    Tensor xt = view(x, R, C), bt(b.data(), DType::BF16, {R, C});
    ops::quantize(xt, f, BlockAxis::Rows, bt);
    for (int64_t i = 0; i < R * C; ++i) {
      ASSERT_EQ(round_bf16(q[i]), q[i]) << i;
      ASSERT_TRUE(same_bits(bf16_to_float(b[i]), q[i])) << i;
    }
  }
}

// Quantizing quantized values changes nothing (so FP8 rows sent by the dispatcher are the
// experts' fprop operand as they are).
TEST(Quantize, IsIdempotent) {
  const int64_t R = 33, C = 384;
  std::vector<float> x = randn(R * C, 7, 12);
  for (Format f : {Format::BF16, Format::MXFP8, Format::FP8Block}) {
    std::vector<float> q = quantized(x, R, C, f, BlockAxis::Rows);
    std::vector<float> qq = quantized(q, R, C, f, BlockAxis::Rows);
    for (int64_t i = 0; i < R * C; ++i) ASSERT_TRUE(same_bits(q[i], qq[i])) << i;
  }
}

TEST(Quantize, MxfpRefusesSquareBlocks) {
  std::vector<float> x(64), q(64);
  Tensor xt = view(x, 8, 8), qt = view(q, 8, 8);
  EXPECT_THROW(ops::quantize(xt, Format::MXFP8, BlockAxis::Square, qt), Error);
}

// ------------------------------------------------------------------ low-precision GEMMs

// C = op(A)·op(B) in double from float operands.
std::vector<double> matmul(const std::vector<float>& a, bool ta, const std::vector<float>& b,
                           bool tb, int64_t M, int64_t N, int64_t K) {
  std::vector<double> c(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? a[k * M + i] : a[i * K + k]) * double(tb ? b[j * K + k] : b[k * N + j]);
      c[i * N + j] = s;
    }
  return c;
}

// |got - want| within fp32 accumulation error of K terms of the products' magnitudes.
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& mag, int64_t K, const char* what) {
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2.0 * K * 6e-8 * mag[i] + 1e-30) << what << " at " << i;
}

std::vector<float> abs_of(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

// Every GEMM of a linear layer is the exact product of its quantized operands, each quantized
// along its GEMM's reduction dimension, accumulated in fp32.
TEST(LowPrecisionLinear, EachGemmIsTheProductOfItsQuantizedOperands) {
  const int64_t N = 96, D = 160, O = 72;
  for (Format f : {Format::BF16, Format::MXFP8, Format::FP8Block}) {
    std::vector<float> x = randn(N * D, 8, 3), w = randn(O * D, 9, 3), dy = randn(N * O, 10, 3);
    const auto p = ops::LinearPrecision::all(f);
    Tensor xt = view(x, N, D), wt = view(w, O, D), dyt = view(dy, N, O);
    std::vector<float> y(N * O), dx(N * D), dw(O * D, 0.0f);
    Tensor yt = view(y, N, O), dxt = view(dx, N, D), dwt = view(dw, O, D);
    ops::linear_forward(xt, wt, yt, {.precision = p});
    ops::linear_backward(dyt, xt, wt, dxt, dwt, {.precision = p});
    const BlockAxis wf = f == Format::FP8Block ? BlockAxis::Square : BlockAxis::Rows;
    const BlockAxis wd = f == Format::FP8Block ? BlockAxis::Square : BlockAxis::Cols;
    // fprop: x along D, w along D
    auto xq = quantized(x, N, D, f, BlockAxis::Rows), wq = quantized(w, O, D, f, wf);
    expect_close(y, matmul(xq, false, wq, true, N, O, D),
                 matmul(abs_of(xq), false, abs_of(wq), true, N, O, D), D, "fprop");
    // dgrad: dy along O, w along O
    auto dyq = quantized(dy, N, O, f, BlockAxis::Rows), wq2 = quantized(w, O, D, f, wd);
    expect_close(dx, matmul(dyq, false, wq2, false, N, D, O),
                 matmul(abs_of(dyq), false, abs_of(wq2), false, N, D, O), O, "dgrad");
    // wgrad: dy and x along N
    auto dyc = quantized(dy, N, O, f, BlockAxis::Cols), xc = quantized(x, N, D, f, BlockAxis::Cols);
    expect_close(dw, matmul(dyc, true, xc, false, O, D, N),
                 matmul(abs_of(dyc), true, abs_of(xc), false, O, D, N), N, "wgrad");
  }
}

// Prepared weight operands give the same results as weights quantized on the fly.
TEST(LowPrecisionLinear, PreparedWeightsEqualOnTheFly) {
  const int64_t N = 64, D = 128, O = 96;
  for (Format f : {Format::BF16, Format::MXFP8, Format::FP8Block}) {
    std::vector<float> x = randn(N * D, 11), w = randn(O * D, 12), dy = randn(N * O, 13);
    const auto p = ops::LinearPrecision::all(f);
    // operand copies in the dtype this CPU's GEMMs take (fp32 or bf16; 4 bytes hold either)
    std::vector<float> wf(O * D), wd(O * D);
    const DType dt = ops::gemm_operand_dtype();
    ops::WeightOperands wq;
    wq.fprop = Tensor(wf.data(), dt, {O, D});
    if (ops::weight_dgrad_separate(p)) wq.dgrad = Tensor(wd.data(), dt, {O, D});
    Tensor wt = view(w, O, D), xt = view(x, N, D), dyt = view(dy, N, O);
    ops::prepare_weight(wt, p, wq);
    std::vector<float> y1(N * O), y2(N * O), dx1(N * D), dx2(N * D);
    Tensor y1t = view(y1, N, O), y2t = view(y2, N, O), dx1t = view(dx1, N, D),
           dx2t = view(dx2, N, D), none;
    ops::linear_forward(xt, wt, y1t, {.precision = p});
    ops::linear_forward(xt, wt, y2t, {.precision = p, .wq = &wq});
    ops::linear_backward(dyt, xt, wt, dx1t, none, {.precision = p});
    ops::linear_backward(dyt, xt, wt, dx2t, none, {.precision = p, .wq = &wq});
    for (int64_t i = 0; i < N * O; ++i) ASSERT_EQ(y1[i], y2[i]);
    for (int64_t i = 0; i < N * D; ++i) ASSERT_EQ(dx1[i], dx2[i]);
  }
}

// Expert wgrad blocks start at each segment's first row: the gradient of a segment is the one
// the same rows give on their own.
TEST(LowPrecisionLinear, GroupedWgradBlocksRestartAtSegments) {
  const int64_t D = 64, O = 32, E = 2, S = 2;
  const std::vector<int32_t> off = {0, 40, 40, 77, 120};  // expert 0: 40 + 0 rows; 1: 37 + 43
  const int64_t M = off.back();
  for (Format f : {Format::MXFP8, Format::FP8Block}) {
    std::vector<float> x = randn(M * D, 14, 4), dy = randn(M * O, 15, 4), w = randn(E * O * D, 16);
    std::vector<float> dw(E * O * D, 0.0f), dx(M * D);
    std::vector<int32_t> offv = off;
    Tensor xt = view(x, M, D), dyt = view(dy, M, O), dxt = view(dx, M, D);
    Tensor wt(w.data(), DType::F32, {E, O, D}), dwt(dw.data(), DType::F32, {E, O, D});
    Tensor ot(offv.data(), DType::I32, {E * S + 1});
    ops::grouped_linear_backward(
        dyt, xt, ot, wt, dxt, dwt,
        {.segments_per_expert = S, .precision = ops::LinearPrecision::all(f)});
    // expert 1 = segment [40, 77) + segment [77, 120), each as its own linear layer
    std::vector<float> want(O * D, 0.0f);
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{40, 77}, {77, 120}}) {
      std::vector<float> part(O * D, 0.0f), xs(x.begin() + r0 * D, x.begin() + r1 * D),
          dys(dy.begin() + r0 * O, dy.begin() + r1 * O);
      Tensor xs_t = view(xs, r1 - r0, D), dys_t = view(dys, r1 - r0, O), pt = view(part, O, D),
             w1(w.data() + O * D, DType::F32, {O, D}), none;
      ops::linear_backward(dys_t, xs_t, w1, none, pt, {.precision = ops::LinearPrecision::all(f)});
      for (int64_t i = 0; i < O * D; ++i) want[i] += part[i];  // tree order of 2 = left + right
    }
    for (int64_t i = 0; i < O * D; ++i) ASSERT_EQ(dw[O * D + i], want[i]) << i;
  }
}

// bf16 operands give what fp32 operands holding the same values give, up to the order of fp32
// accumulation: where the CPU multiplies bf16 (its bf16 GEMM), and elsewhere (the operands
// widened into sgemm, which must then be exact).
TEST(LowPrecisionLinear, Bf16OperandsEqualF32OperandsOfTheSameValues) {
  std::cout << (ops::cpu_has_bf16()
                    ? "bf16 GEMM: the CPU's bf16 instructions\n"
                    : "bf16 GEMM: no bf16 instructions, operands widened to fp32\n");
  const int64_t M = 64, N = 48, K = 256;
  std::vector<float> a = randn(M * K, 17), b = randn(N * K, 18);
  for (auto& v : a) v = round_bf16(v);
  for (auto& v : b) v = round_bf16(v);
  std::vector<uint16_t> ab(M * K), bb(N * K);
  for (int64_t i = 0; i < M * K; ++i) ab[i] = bf16_bits(a[i]);
  for (int64_t i = 0; i < N * K; ++i) bb[i] = bf16_bits(b[i]);
  std::vector<float> c1(M * N), c2(M * N);
  Tensor at = view(a, M, K), bt = view(b, N, K), c1t = view(c1, M, N), c2t = view(c2, M, N);
  Tensor abt(ab.data(), DType::BF16, {M, K}), bbt(bb.data(), DType::BF16, {N, K});
  ops::gemm(at, false, bt, true, c1t);
  ops::gemm(abt, false, bbt, true, c2t);
  const auto mag = matmul(abs_of(a), false, abs_of(b), true, M, N, K);
  for (int64_t i = 0; i < M * N; ++i) {
    ASSERT_NEAR(c1[i], c2[i], 4.0 * K * 6e-8 * mag[i]) << i;
    if (!ops::cpu_has_bf16()) {
      ASSERT_EQ(c1[i], c2[i]) << i;
    }
  }
}

}  // namespace
