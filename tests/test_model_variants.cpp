// Model variants beyond configs/tiny.json (tied embeddings, no shared expert, no MTP, MTP depth
// 2, all-dense, no q/kv YaRN, ungrouped routing): the hand-written backward must agree with the
// loss. Along the gradient direction u = g/|g|, (L(p + εu) − L(p − εu)) / 2ε must equal |g|.
// A self-consistency check that needs no Python, on moet's own initialisation;
// test_golden_variants compares every gradient element of the same variants with the PyTorch
// reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "data/dataset.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

double directional_check(const ModelConfig& cfg) {
  const int64_t B = 2, T = 8;
  Model m(cfg, {.micro_batch = B, .seq_len = T, .loss_weights = {0.3, 1e-2, 1e-3}});
  m.init_parameters(11);
  MockDataset ds(cfg.vocab_size, 5);
  std::vector<int32_t> tok(B * (T + 1));
  ds.next_batch(0, 0, B, T, tok.data());
  ParamStore& ps = m.params();
  ps.zero_grads();
  m.forward(tok.data());
  m.backward(1.0);
  Tensor p = ps.all_values(), g = ps.all_grads();
  std::vector<float> p0(p.f32(), p.f32() + p.numel()), gu(g.f32(), g.f32() + g.numel());
  for (const Weight& w : ps.weights())  // buffers (expert bias) have no gradient
    if (!w.trainable)
      for (int64_t i = 0; i < w.value.numel(); ++i) gu[w.offset + i] = 0;
  double norm = 0;
  for (float x : gu) norm += double(x) * x;
  norm = std::sqrt(norm);
  const double eps = 2e-4;  // small enough that no routing choice flips
  auto loss_at = [&](double t) {
    for (int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = float(p0[i] + t * gu[i] / norm);
    return m.forward(tok.data()).loss;
  };
  double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
  return std::abs(fd - norm) / norm;
}

ModelConfig tiny() { return load_model_config(kRoot + "/configs/tiny.json"); }

TEST(ModelVariants, GoldenConfigItself) { EXPECT_LT(directional_check(tiny()), 1e-2); }

TEST(ModelVariants, TiedEmbeddings) {
  ModelConfig c = tiny();
  c.tie_word_embeddings = true;
  EXPECT_LT(directional_check(c), 1e-2);
}

TEST(ModelVariants, NoSharedExpert) {
  ModelConfig c = tiny();
  c.n_shared_experts = 0;
  EXPECT_LT(directional_check(c), 1e-2);
}

TEST(ModelVariants, NoYarn) {
  ModelConfig c = tiny();
  c.rope_scaling = RopeScaling{};
  EXPECT_LT(directional_check(c), 1e-2);
}

TEST(ModelVariants, NoMtpAndMtpDepthTwo) {
  ModelConfig c = tiny();
  c.num_nextn_predict_layers = 0;
  EXPECT_LT(directional_check(c), 1e-2);
  c.num_nextn_predict_layers = 2;
  EXPECT_LT(directional_check(c), 1e-2);
}

TEST(ModelVariants, AllDenseWithDenseMtp) {
  ModelConfig c = tiny();
  c.first_k_dense_replace = c.num_hidden_layers;
  EXPECT_EQ(c.num_moe_layers(), 0);
  EXPECT_LT(directional_check(c), 1e-2);
}

TEST(ModelVariants, UngroupedRoutingWithoutNormalisation) {
  ModelConfig c = tiny();
  c.n_group = 1;
  c.topk_group = 1;
  c.norm_topk_prob = false;
  EXPECT_LT(directional_check(c), 1e-2);
}

}  // namespace
}  // namespace moet
