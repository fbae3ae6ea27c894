// The backward in two (model/weight_grads.h), as the zero-bubble pipeline schedules run it: the
// input gradients now, the linear layers' weight gradients later. Over three micro-batches whose
// forwards and input-gradient passes run before any weight gradient (the deepest deferral a
// schedule makes), every parameter's gradient is bitwise what the backward computed at once
// gives, in every precision and with selective and full recomputation; the backward hooks fire
// only once a layer's weight gradients are done, and nothing stays kept.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "data/dataset.h"
#include "model/model.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

struct Pass {
  std::vector<float> grads;
  std::vector<int64_t> hooks;  // layers, in the order the hook saw them
  int64_t hooks_before_w = 0;  // hooks fired before the first weight_gradients()
};

// split: the forwards and I passes of all A micro-batches first, then their W passes in order.
Pass run(const std::string& precision, const RecomputePlan& plan, bool split) {
  const ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  const int64_t B = 2, T = 16, A = 3;
  std::vector<std::unique_ptr<Model>> slots;  // one model per micro-batch in flight, as a stage
  ParamStore store;
  store.share_declarations();
  for (int64_t a = 0; a < (split ? A : 1); ++a)
    slots.push_back(
        std::make_unique<Model>(cfg, ModelSpec{.micro_batch = B,
                                               .seq_len = T,
                                               .loss_weights = {0.3, 1e-2, 1e-3},
                                               .precision = resolve_precision(precision, 0),
                                               .recompute = plan,
                                               .store = &store}));
  store.allocate();
  store.initialize(11, cfg.initializer_range);
  store.zero_grads();
  Pass r;
  for (auto& m : slots) m->set_backward_hook([&r](int64_t l) { r.hooks.push_back(l); });
  MockDataset ds(cfg.vocab_size, 5);
  std::vector<int32_t> tok(size_t(B * (T + 1)));
  for (int64_t a = 0; a < A; ++a) {
    Model& m = *slots[size_t(split ? a : 0)];
    ds.next_batch(0, a, B, T, tok.data());
    m.forward(tok.data(), 0.5);
    m.defer_weight_gradients(split);
    m.backward(0.5);
    m.defer_weight_gradients(false);
    if (split) {
      EXPECT_GT(m.kept_weight_gradient_bytes(), 0);
    }
  }
  r.hooks_before_w = int64_t(r.hooks.size());
  if (split)
    for (auto& m : slots) {
      m->weight_gradients();
      EXPECT_EQ(m->kept_weight_gradient_bytes(), 0);
    }
  const Tensor g = store.all_grads();
  r.grads.assign(g.f32(), g.f32() + g.numel());
  return r;
}

void expect_same(const Pass& a, const Pass& b, const std::string& what) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.grads.size(); ++i)
    differ += std::memcmp(&a.grads[i], &b.grads[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << what << ": gradient elements that differ of " << a.grads.size();
}

RecomputePlan selective() {
  RecomputePlan p;
  p.granularity = RecomputeGranularity::kSelective;
  p.modules = moe_recipe_recompute_modules();
  return p;
}

RecomputePlan full() {
  RecomputePlan p;
  p.granularity = RecomputeGranularity::kFull;
  p.method = RecomputeMethod::kUniform;
  p.num_layers = 1;
  return p;
}

TEST(WeightGrads, DeferredWeightGradientsAreTheSameBits) {
  for (const char* precision : {"fp32", "bf16", "mxfp8", "fp8-blockwise", "nvfp4", "mxfp4"})
    for (const RecomputePlan& plan : {RecomputePlan{}, selective(), full()}) {
      const std::string what = std::string(precision) + " " + plan.describe();
      const Pass at_once = run(precision, plan, false), split = run(precision, plan, true);
      expect_same(at_once, split, what);
      // the hooks: none while the weight gradients wait, then each layer's once per micro-batch
      EXPECT_EQ(split.hooks_before_w, 0) << what;
      EXPECT_EQ(split.hooks.size(), at_once.hooks.size()) << what;
    }
}

TEST(WeightGrads, ASecondStepReusesTheKeptCopiesBuffers) {
  // The copies' buffers go back to a pool after W: the next step's deferrals (two micro-batches
  // in flight on one model, as a stage holds them) allocate none. Routed experts' row counts
  // differ by batch; the pool takes the smallest buffer that holds a copy.
  const ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  Model m(cfg, {.micro_batch = 2, .seq_len = 16, .loss_weights = {0.3, 1e-2, 1e-3}});
  m.init_parameters(11);
  MockDataset ds(cfg.vocab_size, 5);
  std::vector<int32_t> tok(2 * 17);
  std::vector<int64_t> allocated;
  for (int64_t step = 0; step < 4; ++step) {
    m.params().zero_grads();
    for (int64_t a = 0; a < 2; ++a) {
      ds.next_batch(0, step * 2 + a, 2, 16, tok.data());
      m.forward(tok.data(), 0.5);
      m.defer_weight_gradients(true);
      m.backward(0.5);
      m.defer_weight_gradients(false);
    }
    m.weight_gradients();
    m.weight_gradients();
    allocated.push_back(m.weight_gradient_buffers());
  }
  EXPECT_GT(allocated[0], 0);
  std::printf("buffers allocated after each step: %lld %lld %lld %lld\n", (long long)allocated[0],
              (long long)allocated[1], (long long)allocated[2], (long long)allocated[3]);
  // a later batch may route more rows to an expert than any before it: at most the first step's
  // count again, then none
  EXPECT_LE(allocated[1], 2 * allocated[0]);
  EXPECT_EQ(allocated[3], allocated[2]) << "step 3 allocated buffers";
}

TEST(WeightGrads, AWeightGradientNotRunLeavesTheGradientShort) {
  // the control: without the W pass the linear layers' gradients are missing
  const Pass at_once = run("fp32", {}, false);
  const ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  Model m(cfg, {.micro_batch = 2, .seq_len = 16, .loss_weights = {0.3, 1e-2, 1e-3}});
  m.init_parameters(11);
  m.params().zero_grads();
  MockDataset ds(cfg.vocab_size, 5);
  std::vector<int32_t> tok(2 * 17);
  ds.next_batch(0, 0, 2, 16, tok.data());
  m.forward(tok.data(), 0.5);
  m.defer_weight_gradients(true);
  m.backward(0.5);
  m.defer_weight_gradients(false);
  const NamedSlice& q = m.params().named("model.layers.0.self_attn.q_a_proj.weight");
  const Tensor g = q.weight->grad;
  double sum = 0;
  for (int64_t i = 0; i < g.numel(); ++i) sum += std::abs(g.f32()[i]);
  EXPECT_EQ(sum, 0.0);
  m.weight_gradients();
  sum = 0;
  for (int64_t i = 0; i < g.numel(); ++i) sum += std::abs(g.f32()[i]);
  EXPECT_GT(sum, 0.0);
  EXPECT_THROW(m.weight_gradients(), Error);  // nothing kept
}

}  // namespace
}  // namespace moet
