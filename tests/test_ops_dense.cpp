// test_ops_dense.cpp — direct checks of the dense CPU ops against naive loops (elementwise, GEMM,
// linear, grouped linear with segments, norm, loss, attention, RoPE, layout), AdamW against a
// hand computation, determinism (bitwise, and independent of the thread count where promised)
// and shape contracts.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "core/bf16.h"
#include "kernels/ops.h"
#include "op_test_util.h"

namespace {

using namespace moet;
using namespace moet::test;

// ------------------------------------------------------------------ elementwise

TEST(OpsElementwise, CopyFillAddScaleSumSquares) {
  Rng r(1);
  Buf a(DType::F32, {3, 5}), d(DType::F64, {15}), b(DType::F32, {15}), o(DType::F32, {15});
  fill_rand(a, r);
  fill_rand(b, r);
  ops::copy(a.t(), d.t());  // converts F32 -> F64
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(d.get(i), a.get(i));
  Buf ii(DType::I32, {4});
  ops::fill(ii.t(), 7);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(ii.get(i), 7);
  ops::add(a.t(), b.t(), o.t());
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(o.get(i), double(float(a.get(i) + b.get(i))));
  ops::add(o.t(), b.t(), o.t());  // out aliases a
  for (int64_t i = 0; i < 15; ++i)
    EXPECT_EQ(o.get(i), double(float(float(a.get(i) + b.get(i)) + float(b.get(i)))));
  ops::copy(a.t(), o.t());
  ops::add_inplace(o.t(), b.t(), -0.5);
  for (int64_t i = 0; i < 15; ++i) EXPECT_NEAR(o.get(i), a.get(i) - 0.5 * b.get(i), 1e-6);
  ops::scale_inplace(o.t(), 0.0);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(o.get(i), 0.0);
  for (DType dt : kFloatTypes) {
    Buf x(dt, {20001});
    fill_rand(x, r, -3, 3);
    double naive = 0;
    for (int64_t i = 0; i < x.n(); ++i) naive += x.get(i) * x.get(i);
    EXPECT_NEAR(ops::sum_squares(x.t()), naive, 1e-12 * naive);
  }
}

// ------------------------------------------------------------------ GEMM and linear

TEST(OpsGemm, MatchesNaiveForAllTransposes) {
  Rng r(2);
  const int64_t M = 5, N = 4, K = 3;
  for (DType dt : kFloatTypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Buf a(dt, ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K});
        Buf b(dt, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N});
        Buf c(dt, {M, N});
        fill_rand(a, r);
        fill_rand(b, r);
        fill_rand(c, r);
        std::vector<double> want(M * N);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += a.get(ta ? k * M + i : i * K + k) * b.get(tb ? j * K + k : k * N + j);
            want[i * N + j] = 0.7 * s + 0.3 * c.get(i * N + j);
          }
        ops::gemm(a.t(), ta, b.t(), tb, c.t(), 0.7, 0.3);
        EXPECT_LT(nerr(c.vals(), want), tol(dt)) << "ta=" << ta << " tb=" << tb;
      }
}

TEST(OpsGemm, EmptyInnerDimensionAndBetaZero) {
  for (DType dt : kFloatTypes) {
    Buf a(dt, {2, 0}), b(dt, {0, 3}), c(dt, {2, 3});
    c.fill(4.0);
    ops::gemm(a.t(), false, b.t(), false, c.t(), 1.0, 0.5);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.get(i), 2.0);
    c.fill(NAN);  // beta = 0 must not read C (arena memory is uninitialised)
    ops::gemm(a.t(), false, b.t(), false, c.t(), 1.0, 0.0);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.get(i), 0.0);
    Buf a2(dt, {2, 2}), b2(dt, {2, 3});
    a2.fill(1.0);
    b2.fill(1.0);
    c.fill(NAN);
    ops::gemm(a2.t(), false, b2.t(), false, c.t(), 1.0, 0.0);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.get(i), 2.0);
  }
}

TEST(OpsLinear, ForwardMatchesNaiveWithLeadingDims) {
  Rng r(3);
  for (DType dt : kFloatTypes) {
    Buf x(dt, {2, 3, 4}), w(dt, {5, 4}), y(dt, {2, 3, 5});
    fill_rand(x, r);
    fill_rand(w, r);
    ops::linear_forward(x.t(), w.t(), y.t());
    std::vector<double> want(30);
    for (int64_t n = 0; n < 6; ++n)
      for (int64_t o = 0; o < 5; ++o)
        for (int64_t d = 0; d < 4; ++d) want[n * 5 + o] += x.get(n * 4 + d) * w.get(o * 4 + d);
    EXPECT_LT(nerr(y.vals(), want), tol(dt));
  }
}

TEST(OpsLinear, BackwardAccumulatesWhereDocumented) {
  Rng r(4);
  Buf x(DType::F64, {3, 4}), w(DType::F64, {2, 4}), dy(DType::F64, {3, 2});
  fill_rand(x, r);
  fill_rand(w, r);
  fill_rand(dy, r);
  Buf dx0(DType::F64, {3, 4}), dw0(DType::F64, {2, 4});
  ops::linear_backward(dy.t(), x.t(), w.t(), dx0.t(), dw0.t());  // dw0 starts at 0
  Buf dx(DType::F64, {3, 4}), dw(DType::F64, {2, 4});
  dx.fill(1.0);
  dw.fill(2.0);
  ops::linear_backward(dy.t(), x.t(), w.t(), dx.t(), dw.t(), {.accumulate = true});
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(dx.get(i), 1.0 + dx0.get(i), 1e-14);
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(dw.get(i), 2.0 + dw0.get(i), 1e-14);
  dx.fill(1.0);
  ops::linear_backward(dy.t(), x.t(), w.t(), dx.t(), dw.t());
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(dx.get(i), dx0.get(i), 1e-14);
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(dw.get(i), 2.0 + 2 * dw0.get(i), 1e-14);
  Tensor none;  // dx skipped
  ops::linear_backward(dy.t(), x.t(), w.t(), none, dw.t());
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(dw.get(i), 2.0 + 3 * dw0.get(i), 1e-14);
}

TEST(OpsGroupedLinear, MatchesPerExpertNaiveAndLeavesEmptyExpertGradient) {
  Rng r(5);
  const std::vector<int> off = {0, 3, 3, 5, 9};  // expert 1 empty
  const int64_t E = 4, M = 9, D = 3, O = 2;
  for (DType dt : kFloatTypes) {
    Buf offsets(DType::I32, {E + 1}), x(dt, {M, D}), w(dt, {E, O, D}), y(dt, {M, O});
    offsets.assign(std::vector<double>(off.begin(), off.end()));
    fill_rand(x, r);
    fill_rand(w, r);
    ops::grouped_linear_forward(x.t(), offsets.t(), w.t(), y.t());
    std::vector<double> want(M * O);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t m = off[e]; m < off[e + 1]; ++m)
        for (int64_t o = 0; o < O; ++o)
          for (int64_t d = 0; d < D; ++d)
            want[m * O + o] += x.get(m * D + d) * w.get((e * O + o) * D + d);
    EXPECT_LT(nerr(y.vals(), want), tol(dt));
    Buf dy(dt, {M, O}), dx(dt, {M, D}), dw(dt, {E, O, D});
    fill_rand(dy, r);
    dx.fill(NAN);  // overwritten
    dw.fill(7.0);
    ops::grouped_linear_backward(dy.t(), x.t(), offsets.t(), w.t(), dx.t(), dw.t());
    for (int64_t i = 0; i < M * D; ++i) EXPECT_FALSE(std::isnan(dx.get(i)));
    for (int64_t i = 1 * O * D; i < 2 * O * D; ++i) EXPECT_EQ(dw.get(i), 7.0);
    for (int64_t i = 0; i < O * D; ++i) EXPECT_NE(dw.get(i), 7.0);
  }
}

// Segments of one expert (one per source rank under expert parallelism): each segment is its own
// GEMM and the weight gradients add in tree order, so 4 segments give (g0 + g1) + (g2 + g3).
TEST(OpsGroupedLinear, SegmentGradientsAddInTreeOrder) {
  const int64_t D = 5, O = 3, S = 4;
  const std::vector<int32_t> rows = {3, 0, 2, 4};  // one segment empty
  Rng rng(11);
  Buf x(DType::F64, {9, D}), dy(DType::F64, {9, O}), w(DType::F64, {1, O, D});
  Buf dx(DType::F64, {9, D}), dw(DType::F64, {1, O, D});
  for (Buf* b : {&x, &dy, &w})
    for (int64_t i = 0; i < b->n(); ++i) b->set(i, rng.uniform(-1, 1));
  std::vector<int32_t> off(S + 1, 0);
  for (int64_t s = 0; s < S; ++s) off[s + 1] = off[s] + rows[s];
  Tensor off_t(off.data(), DType::I32, {S + 1});
  ops::grouped_linear_backward(dy.t(), x.t(), off_t, w.t(), dx.t(), dw.t(),
                               {.segments_per_expert = S});
  // each segment on its own (one segment per call into a zeroed buffer), then the tree of four
  std::vector<std::vector<double>> g;
  for (int64_t s = 0; s < S; ++s) {
    Buf part(DType::F64, {1, O, D});
    int32_t seg[2] = {0, rows[s]};
    Tensor seg_off(seg, DType::I32, {2}), none;
    ops::grouped_linear_backward(dy.t().view({9, O}).rows(off[s], off[s + 1]),
                                 x.t().view({9, D}).rows(off[s], off[s + 1]), seg_off, w.t(), none,
                                 part.t());
    g.push_back(part.vals());
  }
  for (int64_t i = 0; i < O * D; ++i)
    EXPECT_EQ(dw.get(i), (g[0][i] + g[1][i]) + (g[2][i] + g[3][i])) << i;
}

// --deterministic under expert parallelism: into a [S, E, O, D] dw each (expert, source) segment's
// gradient is added into its own slice, bit for bit what the segment gives on its own.
TEST(OpsGroupedLinear, SegmentGradientsKeptApart) {
  const int64_t D = 5, O = 3, S = 2, E = 2;
  const std::vector<int32_t> rows = {3, 0, 2, 4};  // (e0 s0), (e0 s1) empty, (e1 s0), (e1 s1)
  Rng rng(12);
  Buf x(DType::F32, {9, D}), dy(DType::F32, {9, O}), w(DType::F32, {E, O, D});
  Buf dx(DType::F32, {9, D}), dw(DType::F32, {S, E, O, D});
  for (Buf* b : {&x, &dy, &w})
    for (int64_t i = 0; i < b->n(); ++i) b->set(i, rng.uniform(-1, 1));
  std::vector<int32_t> off(E * S + 1, 0);
  for (int64_t g = 0; g < E * S; ++g) off[g + 1] = off[g] + rows[g];
  Tensor off_t(off.data(), DType::I32, {E * S + 1});
  dw.fill(0.0);
  ops::grouped_linear_backward(dy.t(), x.t(), off_t, w.t(), dx.t(), dw.t(),
                               {.segments_per_expert = S});
  for (int64_t e = 0; e < E; ++e)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t g = e * S + s;
      Buf part(DType::F32, {1, O, D});
      part.fill(0.0);
      int32_t seg[2] = {0, rows[g]};
      Tensor seg_off(seg, DType::I32, {2}), none;
      ops::grouped_linear_backward(dy.t().view({9, O}).rows(off[g], off[g + 1]),
                                   x.t().view({9, D}).rows(off[g], off[g + 1]), seg_off,
                                   w.t().view({E, O * D}).rows(e, e + 1), none, part.t());
      for (int64_t i = 0; i < O * D; ++i)
        EXPECT_EQ(dw.get((s * E + e) * O * D + i), part.get(i))
            << "expert " << e << " source " << s;
    }
}

// ------------------------------------------------------------------ norm, loss

TEST(OpsRmsNorm, ForwardFormulaAndAccumulatedDx) {
  Rng r(6);
  Buf x(DType::F64, {2, 5}), w(DType::F64, {5}), y(DType::F64, {2, 5}), rs(DType::F64, {2});
  fill_rand(x, r);
  fill_rand(w, r);
  ops::rmsnorm_forward(x.t(), w.t(), 1e-6, y.t(), rs.t());
  for (int64_t n = 0; n < 2; ++n) {
    double ss = 0;
    for (int64_t j = 0; j < 5; ++j) ss += x.get(n * 5 + j) * x.get(n * 5 + j);
    const double rr = 1 / std::sqrt(ss / 5 + 1e-6);
    EXPECT_NEAR(rs.get(n), rr, 1e-14 * rr);
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_NEAR(y.get(n * 5 + j), x.get(n * 5 + j) * rr * w.get(j), 1e-14);
  }
  Buf dy(DType::F64, {2, 5}), dx0(DType::F64, {2, 5}), dx(DType::F64, {2, 5}), dw(DType::F64, {5});
  fill_rand(dy, r);
  ops::rmsnorm_backward(dy.t(), x.t(), w.t(), rs.t(), dx0.t(), false, dw.t());
  dx.fill(0.25);
  ops::rmsnorm_backward(dy.t(), x.t(), w.t(), rs.t(), dx.t(), true, dw.t());
  for (int64_t i = 0; i < 10; ++i) EXPECT_NEAR(dx.get(i), 0.25 + dx0.get(i), 1e-14);
}

TEST(OpsCrossEntropy, MatchesNaiveAllowsAliasingAndZeroesIgnoredRows) {
  Rng r(7);
  for (DType dt : kFloatTypes) {
    Buf lg(dt, {4, 6}), tg(DType::I32, {4}), dl(dt, {4, 6}), alias(dt, {4, 6});
    fill_rand(lg, r, -5, 5);
    tg.assign({1, -1, 5, 0});
    double want = 0;
    for (int64_t n = 0; n < 4; ++n) {
      if (tg.get(n) < 0) continue;
      double s = 0;
      for (int64_t j = 0; j < 6; ++j) s += std::exp(lg.get(n * 6 + j));
      want += std::log(s) - lg.get(n * 6 + int64_t(tg.get(n)));
    }
    const double loss = ops::cross_entropy(lg.t(), tg.t(), 0.5, dl.t());
    EXPECT_NEAR(loss, want, tol(dt) * want);
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(dl.get(6 + j), 0.0);
    ops::copy(lg.t(), alias.t());
    const double loss2 = ops::cross_entropy(alias.t(), tg.t(), 0.5, alias.t());
    EXPECT_EQ(loss, loss2);
    EXPECT_TRUE(alias.bitwise_equal(dl));
  }
}

TEST(OpsCrossEntropy, StableForLargeLogits) {
  Buf lg(DType::F32, {1, 3}), tg(DType::I32, {1}), dl(DType::F32, {1, 3});
  lg.assign({1000.0, 1001.0, 999.0});
  tg.assign({0});
  const double loss = ops::cross_entropy(lg.t(), tg.t(), 1.0, dl.t());
  const double want = 1.0 + std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0));
  EXPECT_NEAR(loss, want, 1e-6);
  for (int64_t j = 0; j < 3; ++j) EXPECT_TRUE(std::isfinite(dl.get(j)));
}

// ------------------------------------------------------------------ attention

// Naive attention in double: o and each row's log-sum-exp. round: the products' operands (q, k,
// v and the normalised probabilities) as bf16.
void naive_attention(const Buf& q, const Buf& k, const Buf& v, int64_t B, int64_t T, int64_t H,
                     int64_t Kd, int64_t Vd, double scale, bool round, std::vector<double>& want_o,
                     std::vector<double>& want_lse) {
  auto rd = [&](double x) { return round ? double(round_bf16(float(x))) : x; };
  want_o.assign(B * T * H * Vd, 0);
  want_lse.assign(B * H * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> sc(t + 1);
        double m = -1e300, z = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double d = 0;
          for (int64_t i = 0; i < Kd; ++i)
            d += rd(q.get(((b * T + t) * H + h) * Kd + i)) *
                 rd(k.get(((b * T + s) * H + h) * Kd + i));
          sc[s] = scale * d;
          m = std::max(m, sc[s]);
        }
        for (int64_t s = 0; s <= t; ++s) z += std::exp(sc[s] - m);
        want_lse[(b * H + h) * T + t] = m + std::log(z);
        for (int64_t s = 0; s <= t; ++s) {
          const double pr = rd(std::exp(sc[s] - m) / z);
          for (int64_t j = 0; j < Vd; ++j)
            want_o[((b * T + t) * H + h) * Vd + j] +=
                pr * rd(v.get(((b * T + s) * H + h) * Vd + j));
        }
      }
}

TEST(OpsAttention, ForwardMatchesNaive) {
  Rng r(10);
  const int64_t B = 2, T = 150, H = 2, Kd = 5, Vd = 3;  // T > 128: three query tiles
  const double scale = 0.4;
  for (DType dt : kFloatTypes) {
    Buf q(dt, {B, T, H, Kd}), k(dt, {B, T, H, Kd}), v(dt, {B, T, H, Vd});
    Buf lse(dt, {B, H, T}), o(dt, {B, T, H, Vd});
    fill_rand(q, r, -2, 2);
    fill_rand(k, r, -2, 2);
    fill_rand(v, r);
    lse.fill(NAN);
    ops::attention_forward(q.t(), k.t(), v.t(), scale, lse.t(), o.t());
    std::vector<double> want_o, want_lse;
    naive_attention(q, k, v, B, T, H, Kd, Vd, scale, false, want_o, want_lse);
    EXPECT_LT(nerr(o.vals(), want_o), tol(dt));
    EXPECT_LT(nerr(lse.vals(), want_lse), tol(dt));
  }
}

// bf16 operands: the products see bf16 q, k, v and normalised probabilities: attention on the
// rounded operands to fp32 accumulation, and visibly away from the fp32 result.
TEST(OpsAttention, Bf16OperandsRoundTheProducts) {
  Rng r(12);
  const int64_t B = 1, T = 70, H = 2, Kd = 16, Vd = 8;
  Buf q(DType::F32, {B, T, H, Kd}), k(DType::F32, {B, T, H, Kd}), v(DType::F32, {B, T, H, Vd});
  Buf lse(DType::F32, {B, H, T}), o(DType::F32, {B, T, H, Vd}), o32(DType::F32, {B, T, H, Vd});
  fill_rand(q, r, -2, 2);
  fill_rand(k, r, -2, 2);
  fill_rand(v, r);
  ops::attention_forward(q.t(), k.t(), v.t(), 0.3, lse.t(), o.t(), ops::Format::BF16);
  ops::attention_forward(q.t(), k.t(), v.t(), 0.3, lse.t(), o32.t());
  std::vector<double> want_o, want_lse, o64, lse64;
  naive_attention(q, k, v, B, T, H, Kd, Vd, 0.3, true, want_o, want_lse);
  naive_attention(q, k, v, B, T, H, Kd, Vd, 0.3, false, o64, lse64);
  const double e_round = nerr(o.vals(), want_o), e_fp32 = nerr(o.vals(), o64);
  EXPECT_LT(e_round, 4e-3);        // only the probabilities' rounding differs
  EXPECT_GT(e_fp32, 2 * e_round);  // the operands really were rounded
  EXPECT_LT(nerr(o32.vals(), o64), 1e-6);
}

TEST(OpsRope, RotatesPairsByPositionAngle) {
  Buf cs(DType::F64, {2, 1}), sn(DType::F64, {2, 1}), x(DType::F64, {2, 1, 4});
  cs.assign({1, 0});
  sn.assign({0, 1});  // t=0: angle 0; t=1: 90 degrees
  x.assign({1, 2, 3, 4, 1, 2, 3, 4});
  ops::rope_forward(x.t(), 2, cs.t(), sn.t());
  const std::vector<double> want = {1, 2, 3, 4, 1, 2, -4, 3};
  EXPECT_EQ(x.vals(), want);
  ops::rope_backward(x.t(), 2, cs.t(), sn.t());
  const std::vector<double> back = {1, 2, 3, 4, 1, 2, 3, 4};
  EXPECT_EQ(x.vals(), back);
}

TEST(OpsLayout, MlaSplitKvPlacesHeadsAndSharedRopeKey) {
  const int64_t N = 2, H = 2, P = 1, U = 2, R = 1;
  Buf kv(DType::F32, {N, H, P + U}), kr(DType::F32, {N, R});
  Buf k(DType::F32, {N, H, P + R}), v(DType::F32, {N, H, U});
  kv.assign({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  kr.assign({100, 200});
  ops::mla_split_kv(kv.t(), kr.t(), k.t(), v.t());
  EXPECT_EQ(k.vals(), (std::vector<double>{1, 100, 4, 100, 7, 200, 10, 200}));
  EXPECT_EQ(v.vals(), (std::vector<double>{2, 3, 5, 6, 8, 9, 11, 12}));
}

// ------------------------------------------------------------------ AdamW

TEST(OpsAdamW, MatchesHandComputationOverThreeSteps) {
  const std::vector<double> p0 = {0.5, -1.2, 2.0, 0.0};
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, 0.0}, {-0.05, 0.4, 0.3, 1e-3}, {0.2, 0.0, -0.1, -2.0}};
  for (double beta1 : {0.9, 0.3})  // both branches of torch.lerp
    for (DType dt : kFloatTypes) {
      ops::AdamWSpec sp;
      sp.lr = 1e-2;
      sp.beta1 = beta1;
      sp.beta2 = 0.95;
      sp.eps = 1e-8;
      sp.weight_decay = 0.1;
      Buf p(dt, {4}), g(dt, {4}), m(dt, {4}), v(dt, {4});
      p.assign(p0);
      m.fill(0);
      v.fill(0);
      std::vector<double> hp = p0, hm(4, 0), hv(4, 0);
      for (int64_t step = 1; step <= 3; ++step) {
        g.assign(grads[step - 1]);
        sp.step = step;
        ops::adamw_update(p.t(), g.t(), m.t(), v.t(), sp);
        for (int i = 0; i < 4; ++i) {
          const double gi = grads[step - 1][i];
          hp[i] -= sp.lr * sp.weight_decay * hp[i];
          hm[i] = beta1 * hm[i] + (1 - beta1) * gi;
          hv[i] = sp.beta2 * hv[i] + (1 - sp.beta2) * gi * gi;
          const double mhat = hm[i] / (1 - std::pow(beta1, double(step)));
          const double vhat = hv[i] / (1 - std::pow(sp.beta2, double(step)));
          hp[i] -= sp.lr * mhat / (std::sqrt(vhat) + sp.eps);
        }
      }
      const double t = dt == DType::F32 ? 1e-6 : 1e-14;
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(p.get(i), hp[i], t * std::max(1.0, std::abs(hp[i]))) << i;
        EXPECT_NEAR(m.get(i), hm[i], t) << i;
        EXPECT_NEAR(v.get(i), hv[i], t) << i;
      }
    }
}

// The precision-aware optimizer's definition (TE's FusedAdam with exp_avg_dtype bf16): a bf16
// moment is widened, the step computed exactly as with fp32 moments holding those values (p
// updated from the unrounded new moments), and the new moment stored rounded to nearest even.
TEST(OpsAdamW, Bf16MomentsAreTheFp32StepRoundedToNearestEven) {
  const int64_t n = 40000;  // over several threads' ranges
  Rng r(3);
  std::vector<float> p0(n), g(n), m0(n), v0(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = float(r.uniform(-1, 1));
    g[i] = float(r.uniform(-1e-2, 1e-2));
    m0[i] = round_bf16(float(r.uniform(-1e-2, 1e-2)));
    v0[i] = round_bf16(float(r.uniform(0, 1e-4)));
  }
  for (const auto& [m16, v16] : {std::pair{true, true}, {true, false}, {false, true}})
    for (double beta1 : {0.9, 0.3}) {
      const ops::AdamWSpec sp{1e-3, beta1, 0.95, 1e-8, 0.1, 7, 0.8};
      std::vector<float> p = p0, m = m0, v = v0, want_p = p0, want_m = m0, want_v = v0;
      std::vector<uint16_t> mb(n), vb(n);
      for (int64_t i = 0; i < n; ++i) mb[i] = bf16_bits(m0[i]), vb[i] = bf16_bits(v0[i]);
      Tensor tp(p.data(), DType::F32, {n}), tg(g.data(), DType::F32, {n});
      Tensor tm = m16 ? Tensor(mb.data(), DType::BF16, {n}) : Tensor(m.data(), DType::F32, {n});
      Tensor tv = v16 ? Tensor(vb.data(), DType::BF16, {n}) : Tensor(v.data(), DType::F32, {n});
      ops::adamw_update(tp, tg, tm, tv, sp);
      Tensor wp(want_p.data(), DType::F32, {n}), wm(want_m.data(), DType::F32, {n}),
          wv(want_v.data(), DType::F32, {n});
      ops::adamw_update(wp, tg, wm, wv, sp);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(p[i]), std::bit_cast<uint32_t>(want_p[i])) << i;
        ASSERT_EQ(m16 ? mb[i] : bf16_bits(m[i]), bf16_bits(want_m[i])) << i;
        ASSERT_EQ(v16 ? vb[i] : bf16_bits(v[i]), bf16_bits(want_v[i])) << i;
        if (!m16) {
          ASSERT_EQ(std::bit_cast<uint32_t>(m[i]), std::bit_cast<uint32_t>(want_m[i]));
        }
        if (!v16) {
          ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(want_v[i]));
        }
      }
    }
  // bf16 moments beside fp64 weights, and fp32 weights with fp64 moments, are refused
  std::vector<double> d(4);
  std::vector<uint16_t> b(4);
  Tensor td(d.data(), DType::F64, {4}), tb(b.data(), DType::BF16, {4});
  EXPECT_THROW(ops::adamw_update(td, td, tb, td, {}), std::exception);
}

// ------------------------------------------------------------------ determinism and threads

// Runs a bundle of ops with reductions in F32 and returns every result buffer's bytes.
std::vector<std::vector<double>> reduction_bundle() {
  Rng r(15);
  std::vector<std::vector<double>> out;
  {
    const int64_t B = 2, T = 200, H = 3, Kd = 8, Vd = 6;
    Buf q(DType::F32, {B, T, H, Kd}), k(DType::F32, {B, T, H, Kd}), v(DType::F32, {B, T, H, Vd});
    Buf p(DType::F32, {B, H, T}), o(DType::F32, {B, T, H, Vd}), dO(DType::F32, {B, T, H, Vd});
    Buf dq(DType::F32, {B, T, H, Kd}), dk(DType::F32, {B, T, H, Kd}), dv(DType::F32, {B, T, H, Vd});
    for (Buf* b : {&q, &k, &v, &dO}) fill_rand(*b, r);
    ops::attention_forward(q.t(), k.t(), v.t(), 0.35, p.t(), o.t());
    ops::attention_backward(dO.t(), q.t(), k.t(), v.t(), o.t(), p.t(), 0.35, dq.t(), dk.t(),
                            dv.t());
    for (Buf* b : {&o, &p, &dq, &dk, &dv}) out.push_back(b->vals());
  }
  {
    const int64_t N = 300, D = 200;
    Buf x(DType::F32, {N, D}), w(DType::F32, {D}), y(DType::F32, {N, D}), rs(DType::F32, {N});
    Buf dy(DType::F32, {N, D}), dx(DType::F32, {N, D}), dw(DType::F32, {D});
    for (Buf* b : {&x, &w, &dy}) fill_rand(*b, r);
    dw.fill(0);
    ops::rmsnorm_forward(x.t(), w.t(), 1e-6, y.t(), rs.t());
    ops::rmsnorm_backward(dy.t(), x.t(), w.t(), rs.t(), dx.t(), false, dw.t());
    for (Buf* b : {&y, &dx, &dw}) out.push_back(b->vals());
  }
  {
    const int64_t N = 500, V = 50, D = 130;
    Buf tok(DType::I32, {N}), dout(DType::F32, {N, D}), dt(DType::F32, {V, D});
    for (int64_t n = 0; n < N; ++n) tok.set(n, double(r.below(V)));
    fill_rand(dout, r);
    dt.fill(0);
    ops::embedding_backward(tok.t(), dout.t(), dt.t());
    out.push_back(dt.vals());
  }
  {
    const int64_t N = 64, V = 1000, E = 16, K = 4;
    Buf lg(DType::F32, {N, V}), tg(DType::I32, {N}), dl(DType::F32, {N, V});
    fill_rand(lg, r, -4, 4);
    for (int64_t n = 0; n < N; ++n) tg.set(n, n % 7 == 0 ? -1 : double(r.below(V)));
    out.push_back({ops::cross_entropy(lg.t(), tg.t(), 1.0 / 64, dl.t())});
    out.push_back(dl.vals());
    Buf rl(DType::F32, {N, E}), s(DType::F32, {N, E}), idx(DType::I32, {N, K}),
        g(DType::F32, {N, K}), drl(DType::F32, {N, E});
    fill_rand(rl, r, -3, 3);
    drl.fill(0);
    ops::router_forward(rl.t(), Tensor(), router_spec(E, 4, 2, K, true, 2.5), s.t(), idx.t(),
                        g.t());
    out.push_back({ops::balance_loss(s.t(), idx.t(), 4, 16, 0.1, drl.t())});
    out.push_back({ops::z_loss(rl.t(), 0.01, drl.t())});
    out.push_back(drl.vals());
    Buf big(DType::F32, {100003});
    fill_rand(big, r);
    out.push_back({ops::sum_squares(big.t())});
  }
  return out;
}

TEST(OpsDeterminism, TwoRunsAreBitwiseEqual) {
  const auto a = reduction_bundle(), b = reduction_bundle();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "result " << i;
}

// Every reduction in the bundle is ordered independently of the thread count (GEMMs are
// per-(b,h) single-threaded inside attention), so 1 and 2 threads agree bitwise.
TEST(OpsDeterminism, ThreadCountDoesNotChangeReductions) {
  const int saved = ops::num_threads();
  ops::set_num_threads(1);
  EXPECT_EQ(ops::num_threads(), 1);
  const auto one = reduction_bundle();
  ops::set_num_threads(2);
  EXPECT_EQ(ops::num_threads(), 2);
  const auto two = reduction_bundle();
  ops::set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(one[i] == two[i]) << "result " << i;
  for (DType dt : kFloatTypes) {
    Rng r(16);
    Buf x(dt, {1 << 17});
    fill_rand(x, r);
    ops::set_num_threads(1);
    const double s1 = ops::sum_squares(x.t());
    ops::set_num_threads(2);
    const double s2 = ops::sum_squares(x.t());
    ops::set_num_threads(saved);
    EXPECT_EQ(s1, s2);
  }
}

// ------------------------------------------------------------------ shape contracts

TEST(OpsShapeChecks, BadInputsThrow) {
  Buf x(DType::F32, {3, 4}), w(DType::F32, {2, 5}), y(DType::F32, {3, 2});
  EXPECT_THROW(ops::linear_forward(x.t(), w.t(), y.t()), moet::Error);
  Buf w64(DType::F64, {2, 4});
  EXPECT_THROW(ops::linear_forward(x.t(), w64.t(), y.t()), moet::Error);
  Buf tok(DType::I32, {2}), tab(DType::F32, {5, 4}), out(DType::F32, {2, 4});
  tok.assign({1, 5});
  EXPECT_THROW(ops::embedding_forward(tok.t(), tab.t(), out.t()), moet::Error);
  Buf lg(DType::F32, {1, 8}), s(DType::F32, {1, 8}), g(DType::F32, {1, 5}), id(DType::I32, {1, 5});
  EXPECT_THROW(
      ops::router_forward(lg.t(), Tensor(), router_spec(8, 4, 2, 5, true, 1), s.t(), id.t(), g.t()),
      moet::Error);  // 5 > 2 groups * 2 experts
  Buf off(DType::I32, {3}), xm(DType::F32, {4, 4}), we(DType::F32, {2, 2, 4}),
      ym(DType::F32, {4, 2});
  off.assign({0, 2, 3});  // ends at 3, not M = 4
  EXPECT_THROW(ops::grouped_linear_forward(xm.t(), off.t(), we.t(), ym.t()), moet::Error);
}

}  // namespace
