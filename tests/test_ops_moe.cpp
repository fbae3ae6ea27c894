// test_ops_moe.cpp — the mixture-of-experts ops checked directly: the router's tie and group
// rules against a brute-force reference, the balance and z losses against their formulas, and
// the permutation plan and its round trip. (Their gradients are in test_ops.cpp's table.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "op_test_util.h"

namespace {

using namespace moet;
using namespace moet::test;

// ------------------------------------------------------------------ losses

TEST(OpsBalanceLoss, MatchesFormulaAndAccumulates) {
  Rng r(8);
  const int64_t B = 2, T = 3, N = 6, E = 4, K = 2;
  Buf s(DType::F64, {N, E}), idx(DType::I32, {N, K});
  fill_rand(s, r, 0.05, 0.95);
  const auto ch = random_choices(r, N, K, E);
  idx.assign(std::vector<double>(ch.begin(), ch.end()));
  double want = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> f(E, 0), P(E, 0);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = b * T + t;
      for (int64_t k = 0; k < K; ++k) f[ch[n * K + k]] += double(E) / double(K * T);
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += s.get(n * E + e);
      for (int64_t e = 0; e < E; ++e) P[e] += s.get(n * E + e) / z / double(T);
    }
    for (int64_t e = 0; e < E; ++e) want += f[e] * P[e] / double(B);
  }
  Buf g0(DType::F64, {N, E}), g(DType::F64, {N, E});
  EXPECT_NEAR(ops::balance_loss(s.t(), idx.t(), B, T, 0.4, g0.t()), want, 1e-14);
  g.fill(1.5);
  ops::balance_loss(s.t(), idx.t(), B, T, 0.4, g.t());
  for (int64_t i = 0; i < N * E; ++i) EXPECT_NEAR(g.get(i), 1.5 + g0.get(i), 1e-14);
}

TEST(OpsZLoss, MatchesFormulaAndAccumulates) {
  Rng r(9);
  Buf lg(DType::F64, {3, 5}), g0(DType::F64, {3, 5}), g(DType::F64, {3, 5});
  fill_rand(lg, r, -4, 4);
  double want = 0;
  for (int64_t n = 0; n < 3; ++n) {
    double s = 0;
    for (int64_t j = 0; j < 5; ++j) s += std::exp(lg.get(n * 5 + j));
    want += std::log(s) * std::log(s) / 3;
  }
  EXPECT_NEAR(ops::z_loss(lg.t(), 0.1, g0.t()), want, 1e-13);
  g.fill(-1.0);
  ops::z_loss(lg.t(), 0.1, g.t());
  for (int64_t i = 0; i < 15; ++i) EXPECT_NEAR(g.get(i), -1.0 + g0.get(i), 1e-14);
}

// ------------------------------------------------------------------ router

struct Routed {
  std::vector<double> idx, gates, scores;
};

Routed route(DType dt, const ops::RouterSpec& sp, const std::vector<double>& logits,
             const std::vector<double>& bias) {
  const int64_t E = sp.n_experts, N = int64_t(logits.size()) / E, K = sp.top_k;
  Buf lg(dt, {N, E}), b(dt, {E}), s(dt, {N, E}), g(dt, {N, K}), idx(DType::I32, {N, K});
  lg.assign(logits);
  b.assign(bias);
  ops::router_forward(lg.t(), b.t(), sp, s.t(), idx.t(), g.t());
  return {idx.vals(), g.vals(), s.vals()};
}

TEST(OpsRouter, ExactTiesGoToLowerIndex) {
  for (DType dt : kFloatTypes) {
    const auto sp = router_spec(8, 4, 2, 3, true, 1.0);
    // every score 0.5: groups 0 and 1 are kept, experts 0, 1, 2 chosen in index order
    auto r = route(dt, sp, std::vector<double>(8, 0.0), std::vector<double>(8, 0.0));
    EXPECT_EQ(r.idx, (std::vector<double>{0, 1, 2}));
    for (double g : r.gates) EXPECT_NEAR(g, 1.0 / 3, 1e-7);
    // exact ties in both group scores (all 1.125) and among experts (0.625 at 1, 3, 5, 7)
    r = route(dt, sp, std::vector<double>(8, 0.0), {0, 0.125, 0, 0.125, 0.125, 0, 0, 0.125});
    EXPECT_EQ(r.idx, (std::vector<double>{1, 3, 0}));
    for (double g : r.gates) EXPECT_NEAR(g, 1.0 / 3, 1e-7);  // unbiased scores are all 0.5
  }
}

TEST(OpsRouter, GroupLimitExcludesBestExpertOfLosingGroup) {
  for (DType dt : kFloatTypes) {
    // s ~ {.95 .02 | .73 .71 | .69 .67 | .05 .05}: group sums .97, 1.44, 1.36, .10
    const std::vector<double> lg = {3.0, -4.0, 1.0, 0.9, 0.8, 0.7, -3.0, -3.0};
    auto r = route(dt, router_spec(8, 4, 2, 3, true, 2.0), lg, std::vector<double>(8, 0.0));
    EXPECT_EQ(r.idx, (std::vector<double>{2, 3, 4}));  // expert 0 (the best) is in group 0
    const double z = sigmoid_d(1.0) + sigmoid_d(0.9) + sigmoid_d(0.8);
    EXPECT_NEAR(r.gates[0], 2.0 * sigmoid_d(1.0) / z, 1e-6);
    EXPECT_NEAR(r.gates[2], 2.0 * sigmoid_d(0.8) / z, 1e-6);
    // topk_group = 1: only group 1 survives
    r = route(dt, router_spec(8, 4, 1, 2, true, 1.0), lg, std::vector<double>(8, 0.0));
    EXPECT_EQ(r.idx, (std::vector<double>{2, 3}));
  }
}

TEST(OpsRouter, BiasChangesChoiceButGatesUseUnbiasedScores) {
  for (DType dt : kFloatTypes) {
    const auto sp = router_spec(4, 1, 1, 1, false, 2.0);
    const std::vector<double> lg = {1.0, 0.5, 0.0, 0.0};
    auto r = route(dt, sp, lg, {0, 0, 0, 0});
    EXPECT_EQ(r.idx, (std::vector<double>{0}));
    EXPECT_NEAR(r.gates[0], 2.0 * sigmoid_d(1.0), 1e-6);
    r = route(dt, sp, lg, {0, 0.3, 0, 0});
    EXPECT_EQ(r.idx, (std::vector<double>{1}));
    EXPECT_NEAR(r.gates[0], 2.0 * sigmoid_d(0.5), 1e-6);  // not sigmoid(0.5) + 0.3
  }
}

TEST(OpsRouter, NoNormAndKEqualToAllKeptExperts) {
  Rng rng(11);
  for (DType dt : kFloatTypes) {
    std::vector<double> lg(8), bias(8, 0.0);
    for (double& v : lg) v = rng.uniform(-2, 2);
    // K = topk_group * E/G = 4: the chosen set is exactly the two best groups
    auto r = route(dt, router_spec(8, 4, 2, 4, false, 1.5), lg, bias);
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < 4; ++g) {
      const double a = r.scores[2 * g], b = r.scores[2 * g + 1];
      groups.push_back({a + b, g});
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](auto& x, auto& y) { return x.first > y.first; });
    std::vector<int> want = {2 * groups[0].second, 2 * groups[0].second + 1, 2 * groups[1].second,
                             2 * groups[1].second + 1};
    std::vector<int> got(r.idx.begin(), r.idx.end());
    std::sort(want.begin(), want.end());
    std::vector<int> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, want);
    for (int k = 0; k < 4; ++k) {
      EXPECT_NEAR(r.gates[k], 1.5 * r.scores[got[k]], 1e-7);  // no normalisation
      if (k > 0) {
        EXPECT_GE(r.scores[got[k - 1]], r.scores[got[k]]);  // descending
      }
    }
  }
}

// Brute-force reference: stable sorts (ties keep the lower index first) in T arithmetic.
template <typename T>
std::vector<int> ref_route(const std::vector<double>& s_in, const std::vector<double>& b_in,
                           const ops::RouterSpec& sp) {
  const int64_t E = sp.n_experts, G = sp.n_group, EG = E / G;
  std::vector<T> sel(E);
  for (int64_t e = 0; e < E; ++e) sel[e] = T(s_in[e]) + T(b_in[e]);
  std::vector<std::pair<T, int>> gs;
  for (int64_t g = 0; g < G; ++g) {
    std::vector<T> v(sel.begin() + g * EG, sel.begin() + (g + 1) * EG);
    std::sort(v.begin(), v.end(), std::greater<T>());
    gs.push_back({EG > 1 ? T(v[0] + v[1]) : v[0], int(g)});
  }
  std::stable_sort(gs.begin(), gs.end(), [](auto& x, auto& y) { return x.first > y.first; });
  std::vector<std::pair<T, int>> cand;
  for (int64_t r = 0; r < sp.topk_group; ++r)
    for (int64_t i = 0; i < EG; ++i) {
      const int e = int(gs[r].second * EG + i);
      cand.push_back({sel[e], e});
    }
  std::stable_sort(cand.begin(), cand.end(), [](auto& x, auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  std::vector<int> out;
  for (int64_t k = 0; k < sp.top_k; ++k) out.push_back(cand[k].second);
  return out;
}

TEST(OpsRouter, MatchesBruteForceOnRandomRows) {
  Rng rng(12);
  const ops::RouterSpec specs[] = {
      router_spec(8, 4, 2, 3, true, 2.5),   router_spec(16, 4, 1, 4, true, 1.0),
      router_spec(6, 6, 3, 2, true, 1.0),   router_spec(12, 1, 1, 5, true, 1.0),
      router_spec(16, 8, 4, 6, false, 2.0), router_spec(32, 8, 3, 8, true, 2.5)};
  for (DType dt : kFloatTypes)
    for (const auto& sp : specs) {
      const int64_t E = sp.n_experts, N = 64, K = sp.top_k;
      std::vector<double> lg(N * E), bias(E);
      for (double& v : lg) v = rng.uniform(-3, 3);
      for (double& v : bias) v = rng.uniform(-0.2, 0.2);
      const Routed r = route(dt, sp, lg, bias);
      for (int64_t n = 0; n < N; ++n) {
        const std::vector<double> s(r.scores.begin() + n * E, r.scores.begin() + (n + 1) * E);
        const auto want =
            dt == DType::F32 ? ref_route<float>(s, bias, sp) : ref_route<double>(s, bias, sp);
        double z = 0;
        for (int64_t k = 0; k < K; ++k) {
          ASSERT_EQ(int(r.idx[n * K + k]), want[k]) << "E=" << E << " row " << n << " k " << k;
          z += s[want[k]];
        }
        for (int64_t k = 0; k < K; ++k) {
          const double g = s[want[k]] * (sp.norm_topk_prob ? sp.scaling / z : sp.scaling);
          EXPECT_NEAR(r.gates[n * K + k], g, 1e-6 * std::abs(g));
        }
      }
    }
}

// ------------------------------------------------------------------ permutation

struct Plan {
  std::vector<double> off, slot, token;
};

Plan make_plan(const std::vector<int>& idx, int64_t N, int64_t K, int64_t E) {
  Buf bi(DType::I32, {N, K}), off(DType::I32, {E + 1}), slot(DType::I32, {N, K}),
      tok(DType::I32, {N * K});
  bi.assign(std::vector<double>(idx.begin(), idx.end()));
  ops::moe_permute_plan(bi.t(), E, off.t(), slot.t(), tok.t());
  return {off.vals(), slot.vals(), tok.vals()};
}

struct PlanCase {
  const char* name;
  int64_t N, K, E;
  std::vector<int> idx;
};

std::vector<PlanCase> plan_cases() {
  Rng rng(13);
  std::vector<PlanCase> cs;
  cs.push_back({"random", 9, 3, 6, random_choices(rng, 9, 3, 6)});
  cs.push_back({"all_to_one_expert", 6, 1, 4, std::vector<int>(6, 2)});
  std::vector<int> mid = random_choices(rng, 7, 2, 4);  // experts 1..4 of 6: 0 and 5 empty
  for (int& e : mid) e += 1;
  cs.push_back({"empty_experts", 7, 2, 6, mid});
  return cs;
}

TEST(OpsPermute, PlanOffsetsAndSlotsAreConsistentAndStable) {
  for (const auto& pc : plan_cases()) {
    SCOPED_TRACE(pc.name);
    const Plan p = make_plan(pc.idx, pc.N, pc.K, pc.E);
    const int64_t M = pc.N * pc.K;
    ASSERT_EQ(p.off[0], 0);
    ASSERT_EQ(p.off[pc.E], M);
    for (int64_t e = 0; e < pc.E; ++e)
      EXPECT_EQ(p.off[e + 1] - p.off[e], std::count(pc.idx.begin(), pc.idx.end(), int(e)));
    std::vector<int> seen(M, 0);
    std::vector<double> last(pc.E, -1);
    for (int64_t i = 0; i < M; ++i) {  // (n, k) order
      const int e = pc.idx[i];
      const double m = p.slot[i];
      EXPECT_GE(m, p.off[e]);
      EXPECT_LT(m, p.off[e + 1]);
      EXPECT_EQ(p.token[int64_t(m)], double(i / pc.K));
      EXPECT_GT(m, last[e]) << "not stable in (n, k) order";
      last[e] = m;
      ++seen[int64_t(m)];
    }
    for (int c : seen) EXPECT_EQ(c, 1);
  }
}

TEST(OpsPermute, RoundTripWithUnitGatesGivesKTimesX) {
  Rng rng(14);
  for (const auto& pc : plan_cases())
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE(pc.name);
      const int64_t N = pc.N, K = pc.K, E = pc.E, M = N * K, D = 5;
      Buf bi(DType::I32, {N, K}), off(DType::I32, {E + 1}), slot(DType::I32, {N, K}),
          tok(DType::I32, {M});
      bi.assign(std::vector<double>(pc.idx.begin(), pc.idx.end()));
      ops::moe_permute_plan(bi.t(), E, off.t(), slot.t(), tok.t());
      Buf x(dt, {N, D}), xp(dt, {M, D}), y(dt, {N, D}), g(dt, {N, K}), dx(dt, {N, D});
      fill_rand(x, rng);
      g.fill(1.0);
      ops::gather_rows(x.t(), tok.t(), xp.t());
      y.fill(NAN);  // overwritten when not accumulating
      ops::unpermute_forward(xp.t(), slot.t(), g.t(), y.t(), false);
      std::vector<double> want = x.vals();
      for (double& v : want) v *= double(K);
      EXPECT_LT(nerr(y.vals(), want), dt == DType::F32 ? 1e-6 : 1e-15);
      dx.fill(0);
      ops::gather_rows_backward(xp.t(), slot.t(), dx.t());
      EXPECT_LT(nerr(dx.vals(), want), dt == DType::F32 ? 1e-6 : 1e-15);
      ops::unpermute_forward(xp.t(), slot.t(), g.t(), y.t(), true);  // accumulate: 2K x
      for (double& v : want) v *= 2;
      EXPECT_LT(nerr(y.vals(), want), dt == DType::F32 ? 1e-6 : 1e-15);
    }
}

}  // namespace
