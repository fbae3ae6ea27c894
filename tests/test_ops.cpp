// test_ops.cpp — the CPU ops: a table of differentiable cases (every op with a backward) checked
// by finite differences in F64 and F32 against F64. Direct checks of the dense ops are in
// test_ops_dense.cpp, of the MoE ops in test_ops_moe.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "kernels/ops.h"
#include "op_test_util.h"

namespace {

using namespace moet;
using namespace moet::test;

// ------------------------------------------------------------------ differentiable cases

void case_linear(Case& c) {
  auto &x = c.rand({5, 4}), &w = c.rand({3, 4}), &R = c.rand({5, 3});
  auto &y = c.make({5, 3}), &dx = c.make({5, 4}), &dw = c.make({3, 4});
  c.wrt = {{"x", &x}, {"w", &w}};
  c.grads = {{"dx", &dx}, {"dw", &dw}};
  c.outs = {{"y", &y}};
  c.loss = [&] {
    ops::linear_forward(x.t(), w.t(), y.t());
    return dot(R, y);
  };
  c.backward = [&] {
    dw.fill(0);
    ops::linear_backward(R.t(), x.t(), w.t(), dx.t(), dw.t());
  };
}

// Expert row counts given; E = counts.size(), D = 3, O = 4.
void grouped_case(Case& c, const std::vector<int>& counts) {
  const int64_t E = counts.size(), D = 3, O = 4;
  std::vector<int> off(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) off[e + 1] = off[e] + counts[e];
  const int64_t M = off[E];
  auto& offsets = c.ints({E + 1}, off);
  auto &x = c.rand({M, D}), &w = c.rand({E, O, D}), &R = c.rand({M, O});
  auto &y = c.make({M, O}), &dx = c.make({M, D}), &dw = c.make({E, O, D});
  c.wrt = {{"x", &x}, {"w", &w}};
  c.grads = {{"dx", &dx}, {"dw", &dw}};
  c.outs = {{"y", &y}};
  c.loss = [&] {
    ops::grouped_linear_forward(x.t(), offsets.t(), w.t(), y.t());
    return dot(R, y);
  };
  c.backward = [&] {
    dw.fill(0);
    ops::grouped_linear_backward(R.t(), x.t(), offsets.t(), w.t(), dx.t(), dw.t());
  };
}

void case_rmsnorm(Case& c) {
  const int64_t N = 3, D = 70;  // D > 64: two column blocks in dw
  auto &x = c.rand({N, D}, -2, 2), &w = c.rand({D}, 0.5, 1.5), &R = c.rand({N, D});
  auto &y = c.make({N, D}), &rstd = c.make({N}), &dx = c.make({N, D}), &dw = c.make({D});
  c.wrt = {{"x", &x}, {"w", &w}};
  c.grads = {{"dx", &dx}, {"dw", &dw}};
  c.outs = {{"y", &y}, {"rstd", &rstd}};
  c.loss = [&] {
    ops::rmsnorm_forward(x.t(), w.t(), 1e-5, y.t(), rstd.t());
    return dot(R, y);
  };
  c.backward = [&] {
    dw.fill(0);
    ops::rmsnorm_backward(R.t(), x.t(), w.t(), rstd.t(), dx.t(), false, dw.t());
  };
}

void case_swiglu(Case& c) {
  auto &gu = c.rand({3, 10}, -3, 3), &R = c.rand({3, 5});
  auto &h = c.make({3, 5}), &dgu = c.make({3, 10});
  c.wrt = {{"gu", &gu}};
  c.grads = {{"dgu", &dgu}};
  c.outs = {{"h", &h}};
  c.loss = [&] {
    ops::swiglu_forward(gu.t(), h.t());
    return dot(R, h);
  };
  c.backward = [&] { ops::swiglu_backward(R.t(), gu.t(), dgu.t()); };
}

void case_embedding(Case& c) {
  auto& tokens = c.ints({6}, {1, 3, 1, 5, 0, 1});
  auto &table = c.rand({6, 70}), &R = c.rand({6, 70});
  auto &out = c.make({6, 70}), &dtable = c.make({6, 70});
  c.wrt = {{"table", &table}};
  c.grads = {{"dtable", &dtable}};
  c.outs = {{"out", &out}};
  c.loss = [&] {
    ops::embedding_forward(tokens.t(), table.t(), out.t());
    return dot(R, out);
  };
  c.backward = [&] {
    dtable.fill(0);
    ops::embedding_backward(tokens.t(), R.t(), dtable.t());
  };
}

void case_cross_entropy(Case& c) {
  auto& targets = c.ints({5}, {2, -1, 6, 0, -1});  // two ignored rows
  auto &logits = c.rand({5, 7}, -3, 3), &lossv = c.make({1}), &dl = c.make({5, 7});
  const double scale = 0.37;
  c.wrt = {{"logits", &logits}};
  c.grads = {{"dlogits", &dl}};
  c.outs = {{"loss", &lossv}};
  c.loss = [&, scale] {
    Tensor none;
    const double l = scale * ops::cross_entropy(logits.t(), targets.t(), 0.0, none);
    lossv.set(0, l);
    return l;
  };
  c.backward = [&, scale] { ops::cross_entropy(logits.t(), targets.t(), scale, dl.t()); };
}

// cos/sin of angle t * theta^(-2i/R), scaled by an attention factor (so that the backward must
// be the transpose, not the inverse).
void rope_tables(Buf& cs, Buf& sn, int64_t T, int64_t R2, double factor) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < R2; ++i) {
      const double a = double(t) * std::pow(100.0, -double(i) / double(R2));
      cs.set(t * R2 + i, factor * std::cos(a));
      sn.set(t * R2 + i, factor * std::sin(a));
    }
}

void rope_case(Case& c, std::vector<int64_t> shape, int64_t off, int64_t R2) {
  const int64_t T = 3;
  auto &cs = c.make({T, R2}), &sn = c.make({T, R2});
  rope_tables(cs, sn, T, R2, 1.2);
  auto &x = c.rand(shape), &R = c.rand(shape), &y = c.make(shape), &dx = c.make(shape);
  c.wrt = {{"x", &x}};
  c.grads = {{"dx", &dx}};
  c.outs = {{"y", &y}};
  c.loss = [&, off] {
    ops::copy(x.t(), y.t());
    ops::rope_forward(y.t(), off, cs.t(), sn.t());
    return dot(R, y);
  };
  c.backward = [&, off] {
    ops::copy(R.t(), dx.t());
    ops::rope_backward(dx.t(), off, cs.t(), sn.t());
  };
}

void attention_case(Case& c, int64_t B, int64_t T, int64_t H, int64_t Kd, int64_t Vd) {
  auto &q = c.rand({B, T, H, Kd}, -2, 2), &k = c.rand({B, T, H, Kd}, -2, 2);
  auto &v = c.rand({B, T, H, Vd}), &R = c.rand({B, T, H, Vd});
  auto &lse = c.make({B, H, T}), &o = c.make({B, T, H, Vd});
  auto &dq = c.make({B, T, H, Kd}), &dk = c.make({B, T, H, Kd}), &dv = c.make({B, T, H, Vd});
  const double scale = 0.6;
  c.wrt = {{"q", &q}, {"k", &k}, {"v", &v}};
  c.grads = {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}};
  c.outs = {{"o", &o}, {"lse", &lse}};
  c.loss = [&, scale] {
    ops::attention_forward(q.t(), k.t(), v.t(), scale, lse.t(), o.t());
    return dot(R, o);
  };
  c.backward = [&, scale] {
    ops::attention_backward(R.t(), q.t(), k.t(), v.t(), o.t(), lse.t(), scale, dq.t(), dk.t(),
                            dv.t());
  };
}

// Gates through sigmoid (and the normalisation); the choice must stay fixed under the FD steps.
void router_case(Case& c, bool norm) {
  const ops::RouterSpec sp = router_spec(8, 4, 2, 3, norm, 2.5);
  const int64_t N = 6;
  auto &logits = c.rand({N, 8}, -2, 2), &bias = c.rand({8}, -0.1, 0.1), &R = c.rand({N, 3});
  auto &scores = c.make({N, 8}), &gates = c.make({N, 3}), &dl = c.make({N, 8});
  auto& idx = c.make_as(DType::I32, {N, 3});
  auto& idx0 = c.make_as(DType::I32, {N, 3});
  idx0.fill(-1);
  c.wrt = {{"logits", &logits}};
  c.grads = {{"dlogits", &dl}};
  c.outs = {{"scores", &scores}, {"gates", &gates}, {"idx", &idx}};
  c.loss = [&, sp] {
    ops::router_forward(logits.t(), bias.t(), sp, scores.t(), idx.t(), gates.t());
    if (idx0.get(0) < 0) ops::copy(idx.t(), idx0.t());
    if (!idx.bitwise_equal(idx0)) throw std::runtime_error("router choice changed under FD step");
    return dot(R, gates);
  };
  c.backward = [&, sp] { ops::router_backward(R.t(), scores.t(), idx.t(), sp, dl.t()); };
}

void case_balance(Case& c) {
  const int64_t B = 2, T = 4, N = B * T, E = 8, K = 2;
  auto& idx = c.ints({N, K}, random_choices(c.rng, N, K, E));
  auto &logits = c.rand({N, E}, -2, 2), &s = c.make({N, E}), &lossv = c.make({1});
  auto& dl = c.make({N, E});
  const double coef = 0.7;
  c.wrt = {{"logits", &logits}};
  c.grads = {{"dlogits", &dl}};
  c.outs = {{"loss", &lossv}};
  auto scores = [&] {
    for (int64_t i = 0; i < s.n(); ++i) s.set(i, sigmoid_d(logits.get(i)));
  };
  c.loss = [&, scores, coef] {
    scores();
    Tensor none;
    const double l = coef * ops::balance_loss(s.t(), idx.t(), B, T, 0.0, none);
    lossv.set(0, l);
    return l;
  };
  c.backward = [&, scores, coef] {
    scores();
    dl.fill(0);
    ops::balance_loss(s.t(), idx.t(), B, T, coef, dl.t());
  };
}

void case_z_loss(Case& c) {
  auto &logits = c.rand({5, 8}, -3, 3), &lossv = c.make({1}), &dl = c.make({5, 8});
  const double coef = 0.3;
  c.wrt = {{"logits", &logits}};
  c.grads = {{"dlogits", &dl}};
  c.outs = {{"loss", &lossv}};
  c.loss = [&, coef] {
    Tensor none;
    const double l = coef * ops::z_loss(logits.t(), 0.0, none);
    lossv.set(0, l);
    return l;
  };
  c.backward = [&, coef] {
    dl.fill(0);
    ops::z_loss(logits.t(), coef, dl.t());
  };
}

// A permutation plan for N=4 tokens, K=2, E=3; returns slot and token buffers.
std::pair<Buf*, Buf*> plan_case(Case& c, int64_t N, int64_t K, int64_t E) {
  auto& idx = c.ints({N, K}, random_choices(c.rng, N, K, E));
  auto& off = c.make_as(DType::I32, {E + 1});
  auto& slot = c.make_as(DType::I32, {N, K});
  auto& token = c.make_as(DType::I32, {N * K});
  ops::moe_permute_plan(idx.t(), E, off.t(), slot.t(), token.t());
  return {&slot, &token};
}

void case_unpermute(Case& c) {
  const int64_t N = 4, K = 2, D = 5;
  auto [slot, token] = plan_case(c, N, K, 3);
  auto &yp = c.rand({N * K, D}), &gates = c.rand({N, K}, 0, 1), &R = c.rand({N, D});
  auto &y = c.make({N, D}), &dyp = c.make({N * K, D}), &dg = c.make({N, K});
  c.wrt = {{"yp", &yp}, {"gates", &gates}};
  c.grads = {{"dyp", &dyp}, {"dgates", &dg}};
  c.outs = {{"y", &y}};
  c.loss = [&, slot] {
    ops::unpermute_forward(yp.t(), slot->t(), gates.t(), y.t(), false);
    return dot(R, y);
  };
  c.backward = [&, slot] {
    ops::unpermute_backward(R.t(), yp.t(), slot->t(), gates.t(), dyp.t(), dg.t());
  };
}

void case_gather_rows(Case& c) {
  const int64_t N = 4, K = 2, D = 5;
  auto [slot, token] = plan_case(c, N, K, 3);
  auto &x = c.rand({N, D}), &R = c.rand({N * K, D});
  auto &xp = c.make({N * K, D}), &dx = c.make({N, D});
  c.wrt = {{"x", &x}};
  c.grads = {{"dx", &dx}};
  c.outs = {{"xp", &xp}};
  c.loss = [&, token] {
    ops::gather_rows(x.t(), token->t(), xp.t());
    return dot(R, xp);
  };
  c.backward = [&, slot] {
    dx.fill(0);
    ops::gather_rows_backward(R.t(), slot->t(), dx.t());
  };
}

void case_concat(Case& c) {
  auto &a = c.rand({4, 3}), &b = c.rand({4, 2}), &R = c.rand({4, 5});
  auto &out = c.make({4, 5}), &da = c.make({4, 3}), &db = c.make({4, 2});
  c.wrt = {{"a", &a}, {"b", &b}};
  c.grads = {{"da", &da}, {"db", &db}};
  c.outs = {{"out", &out}};
  c.loss = [&] {
    ops::concat_cols(a.t(), b.t(), out.t());
    return dot(R, out);
  };
  c.backward = [&] { ops::split_cols(R.t(), da.t(), db.t()); };
}

void case_mla_split(Case& c) {
  const int64_t N = 3, H = 2, P = 2, U = 3, Rr = 2;
  auto &kv = c.rand({N, H, P + U}), &kr = c.rand({N, Rr});
  auto &Rk = c.rand({N, H, P + Rr}), &Rv = c.rand({N, H, U});
  auto &k = c.make({N, H, P + Rr}), &v = c.make({N, H, U});
  auto &dkv = c.make({N, H, P + U}), &dkr = c.make({N, Rr});
  c.wrt = {{"kv", &kv}, {"kr", &kr}};
  c.grads = {{"dkv", &dkv}, {"dkr", &dkr}};
  c.outs = {{"k", &k}, {"v", &v}};
  c.loss = [&] {
    ops::mla_split_kv(kv.t(), kr.t(), k.t(), v.t());
    return dot(Rk, k) + dot(Rv, v);
  };
  c.backward = [&] { ops::mla_split_kv_backward(Rk.t(), Rv.t(), dkv.t(), dkr.t()); };
}

struct NamedCase {
  std::string name;
  CaseFactory make;
};
void PrintTo(const NamedCase& c, std::ostream* os) { *os << c.name; }

std::vector<NamedCase> all_cases() {
  return {
      {"linear", case_linear},
      {"grouped_linear_empty_expert",
       [](Case& c) {
         grouped_case(c, {5, 0, 1, 2});
       }},
      {"grouped_linear_skewed",
       [](Case& c) {
         grouped_case(c, {0, 0, 7, 1});
       }},
      {"rmsnorm", case_rmsnorm},
      {"swiglu", case_swiglu},
      {"embedding", case_embedding},
      {"cross_entropy_ignored_rows", case_cross_entropy},
      {"rope_heads",
       [](Case& c) {
         rope_case(c, {6, 2, 7}, 2, 2);
       }},
      {"rope_4d",
       [](Case& c) {
         rope_case(c, {2, 3, 2, 6}, 0, 3);
       }},
      {"rope_shared_key_2d",
       [](Case& c) {
         rope_case(c, {6, 4}, 0, 2);
       }},
      {"attention", [](Case& c) { attention_case(c, 2, 5, 2, 3, 4); }},
      {"attention_panels", [](Case& c) { attention_case(c, 1, 140, 1, 2, 2); }},
      {"router_gates_norm", [](Case& c) { router_case(c, true); }},
      {"router_gates_no_norm", [](Case& c) { router_case(c, false); }},
      {"balance_loss", case_balance},
      {"z_loss", case_z_loss},
      {"unpermute", case_unpermute},
      {"gather_rows", case_gather_rows},
      {"concat_cols", case_concat},
      {"mla_split_kv", case_mla_split},
  };
}

class OpGrad : public ::testing::TestWithParam<NamedCase> {};

// Central differences (eps 1e-6, F64) of the projected loss against the analytic backward.
// Rounding in the loss is ~1e-16 relative, so the FD error is ~1e-10 / 1e-6 ≪ 1e-6.
TEST_P(OpGrad, FiniteDifferencesF64) {
  Case c(DType::F64);
  GetParam().make(c);
  c.loss();
  c.backward();
  ASSERT_EQ(c.wrt.size(), c.grads.size());
  std::vector<std::vector<double>> analytic;
  for (auto& g : c.grads) analytic.push_back(g.second->vals());
  const auto numeric = numeric_grads(c, 1e-6);
  for (size_t i = 0; i < c.wrt.size(); ++i) {
    double norm = 0;
    for (double v : analytic[i]) norm += v * v;
    EXPECT_GT(norm, 1e-6) << c.grads[i].first << " is (nearly) zero: the check would be vacuous";
    EXPECT_LT(nerr(numeric[i], analytic[i]), 1e-6) << "gradient " << c.grads[i].first;
  }
}

TEST_P(OpGrad, F32MatchesF64) {
  Case a(DType::F32), b(DType::F64);
  GetParam().make(a);
  GetParam().make(b);
  const double la = a.loss(), lb = b.loss();
  a.backward();
  b.backward();
  EXPECT_LT(std::abs(la - lb) / std::max(1.0, std::abs(lb)), 1e-5);
  for (size_t i = 0; i < a.outs.size(); ++i)
    EXPECT_LT(nerr(a.outs[i].second->vals(), b.outs[i].second->vals()), 1e-5)
        << "output " << a.outs[i].first;
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_LT(nerr(a.grads[i].second->vals(), b.grads[i].second->vals()), 1e-5)
        << "gradient " << a.grads[i].first;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGrad, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
