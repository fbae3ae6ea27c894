// test_lm_head.cpp — the chunked LM head (logits recomputed per chunk, only each row's
// log-sum-exp kept; or, in training, each chunk's gradient taken in forward) gives the loss and
// gradients of the plain one: full logits, cross-entropy, and the projection's backward —
// across several chunks and with ignored targets.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/arena.h"
#include "kernels/ops.h"
#include "model/lm_head.h"

namespace moet {
namespace {

TEST(LmHead, ChunksGiveThePlainHeadsLossAndGradients) {
  const int64_t N = 300, D = 24, V = 131072;  // DeepSeek-V3-sized vocabulary: chunks of 128 rows
  const int64_t C = LmHead::chunk_rows(N, V);
  ASSERT_LT(C, N / 2) << "the test wants at least three chunks";
  ParamStore ps;
  Weight* proj = ps.declare("lm_head.weight", {V, D}, Init::Normal, true);
  LmHead head(1e-6, D, ps, "model.norm.weight", proj);
  ps.allocate();
  ps.initialize(3, 0.5);
  Arena act(64 << 20), scratch(int64_t(256) << 20);
  Workspace ws{act, scratch, 1, N};
  head.plan(ws);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> h(N * D), dh(N * D);
  std::vector<int32_t> tgt(N);
  for (auto& x : h) x = nd(g);
  for (int64_t n = 0; n < N; ++n) tgt[n] = n % 7 == 3 ? -1 : int32_t(g() % V);
  Tensor ht(h.data(), DType::F32, {N, D}), dht(dh.data(), DType::F32, {N, D});
  Tensor tt(tgt.data(), DType::I32, {N});
  ps.zero_grads();
  const double loss = head.forward(ht, tt);
  head.backward(ht, tt, 0.7, dht, false);
  std::vector<float> dw(proj->grad.f32(), proj->grad.f32() + V * D);
  // training's form: the scale announced to forward, which then takes the projection's
  // gradient from the logits at hand; the same numbers (the same GEMMs in the same order)
  ps.zero_grads();
  std::vector<float> dh_fused(N * D);
  Tensor dhf(dh_fused.data(), DType::F32, {N, D});
  EXPECT_EQ(head.forward(ht, tt, 0.7), loss);
  head.backward(ht, tt, 0.7, dhf, false);
  for (int64_t i = 0; i < N * D; ++i) ASSERT_EQ(dh_fused[i], dh[i]) << i;
  for (int64_t i = 0; i < V * D; ++i) ASSERT_EQ(proj->grad.f32()[i], dw[i]) << i;
  EXPECT_THROW(
      {
        head.forward(ht, tt, 0.7);
        head.backward(ht, tt, 0.5, dhf, false);
      },
      Error);

  // the plain head: norm, full logits, cross-entropy, backward
  std::vector<float> fn(N * D), rstd(N), lg(N * V), dfn(N * D), dh2(N * D), w1(D, 1.0f);
  std::vector<float> dnorm(D, 0.0f);
  Tensor fnt(fn.data(), DType::F32, {N, D}), rt(rstd.data(), DType::F32, {N});
  Tensor w1t(w1.data(), DType::F32, {D}), lgt(lg.data(), DType::F32, {N, V});
  Tensor dfnt(dfn.data(), DType::F32, {N, D}), dh2t(dh2.data(), DType::F32, {N, D});
  Tensor dnt(dnorm.data(), DType::F32, {D});
  ops::rmsnorm_forward(ht, w1t, 1e-6, fnt, rt);
  ops::linear_forward(fnt, proj->value, lgt);
  int64_t valid = 0;
  for (int32_t t : tgt) valid += t >= 0;
  const double want = ops::cross_entropy(lgt, tt, 0.7 / double(valid), lgt) / double(valid);
  ps.zero_grads();
  ops::linear_backward(lgt, fnt, proj->value, dfnt, proj->grad);
  ops::rmsnorm_backward(dfnt, ht, w1t, rt, dh2t, false, dnt);

  EXPECT_NEAR(loss, want, 1e-6 * want);
  double e = 0, n2 = 0;
  for (int64_t i = 0; i < N * D; ++i) e += std::pow(dh[i] - dh2[i], 2), n2 += dh2[i] * dh2[i];
  EXPECT_LT(std::sqrt(e / n2), 1e-5);
  e = n2 = 0;
  for (int64_t i = 0; i < V * D; ++i)
    e += std::pow(dw[i] - proj->grad.f32()[i], 2), n2 += double(dw[i]) * dw[i];
  EXPECT_LT(std::sqrt(e / n2), 1e-5);
  // the logits are recomputed on request
  std::vector<float> again(N * V);
  Tensor at(again.data(), DType::F32, {N, V});
  head.logits(at);
  std::vector<float> plain(N * V);
  Tensor pt(plain.data(), DType::F32, {N, V});
  ops::linear_forward(fnt, proj->value, pt);
  for (int64_t i = 0; i < N * V; ++i) ASSERT_EQ(again[i], plain[i]);
}

}  // namespace
}  // namespace moet
