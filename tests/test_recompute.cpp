// Activation recomputation (model/recompute.h, --recompute-granularity): every granularity,
// method and selective module gives bitwise the losses, gradients and router statistics of
// keeping every activation, in fp32, bf16 and MXFP8, over two micro-batches (so the shared
// region is reused); and the activation memory shrinks by exactly what Model::recompute_memory
// says it saves.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "data/dataset.h"
#include "model/model.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

struct Trained {
  std::vector<double> losses;
  std::vector<float> grads;
  std::vector<int64_t> loads;  // every MoE layer's expert loads
  double balance = 0, z = 0;
  size_t activation_bytes = 0;
  RecomputeMemory memory;
};

Trained train(const RecomputePlan& plan, const std::string& precision) {
  const ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  const int64_t B = 2, T = 16, A = 2;
  Model m(cfg, {.micro_batch = B,
                .seq_len = T,
                .loss_weights = {0.3, 1e-2, 1e-3},
                .precision = resolve_precision(precision, 0),
                .recompute = plan});
  m.init_parameters(11);
  MockDataset ds(cfg.vocab_size, 5);
  std::vector<int32_t> tok(B * (T + 1));
  m.params().zero_grads();
  Trained r;
  for (int64_t a = 0; a < A; ++a) {
    ds.next_batch(0, a, B, T, tok.data());
    const LossBreakdown l = m.forward(tok.data(), 0.5);
    m.backward(0.5);
    for (double v : {l.loss, l.lm_loss, l.mtp_loss, l.balance_loss, l.z_loss})
      r.losses.push_back(v);
  }
  const Tensor g = m.params().all_grads();
  r.grads.assign(g.f32(), g.f32() + g.numel());
  for (MoeLayer* moe : m.moe_layers()) {
    r.loads.insert(r.loads.end(), moe->stats().load_E.begin(), moe->stats().load_E.end());
    r.balance += moe->stats().balance_loss;
    r.z += moe->stats().z_loss;
  }
  r.activation_bytes = m.activation_bytes();
  r.memory = m.recompute_memory();
  return r;
}

RecomputePlan selective(std::initializer_list<RecomputeModule> modules) {
  RecomputePlan p;
  p.granularity = RecomputeGranularity::kSelective;
  for (RecomputeModule m : modules) p.modules.add(m);
  return p;
}

RecomputePlan full(RecomputeMethod method, int64_t layers) {
  RecomputePlan p;
  p.granularity = RecomputeGranularity::kFull;
  p.method = method;
  p.num_layers = layers;
  return p;
}

std::vector<RecomputePlan> plans() {
  std::vector<RecomputePlan> out;
  for (const auto& [name, m] : recompute_module_choices()) out.push_back(selective({m}));
  using M = RecomputeModule;
  out.push_back(selective({M::kMlaUpProj, M::kMoeAct, M::kLayernorm}));  // Megatron's MoE set
  out.push_back(selective(
      {M::kCoreAttn, M::kMlaUpProj, M::kMoeAct, M::kLayernorm, M::kMlp, M::kSharedExperts}));
  out.push_back(selective({M::kLayernorm, M::kMoe, M::kMlp, M::kCoreAttn}));
  out.push_back(full(RecomputeMethod::kUniform, 1));
  out.push_back(full(RecomputeMethod::kUniform, 2));  // groups {0, 1}, {2}
  out.push_back(full(RecomputeMethod::kBlock, 2));    // layers 0 and 1; 2 kept
  return out;
}

void expect_bitwise(const Trained& a, const Trained& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0)
        << what << ": loss part " << i << " " << a.losses[i] << " vs " << b.losses[i];
  ASSERT_EQ(a.grads.size(), b.grads.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.grads.size(); ++i)
    differ += std::memcmp(&a.grads[i], &b.grads[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << what << ": gradient elements that differ";
  EXPECT_EQ(a.loads, b.loads) << what << ": expert loads counted again";
  EXPECT_EQ(a.balance, b.balance) << what;
  EXPECT_EQ(a.z, b.z) << what;
}

TEST(Recompute, EveryPlanTrainsBitwiseWhatKeepingEverythingTrains) {
  for (const char* precision : {"fp32", "bf16", "mxfp8"}) {
    const Trained none = train(RecomputePlan{}, precision);
    for (const RecomputePlan& plan : plans())
      expect_bitwise(none, train(plan, precision), std::string(precision) + " " + plan.describe());
  }
}

TEST(Recompute, ActivationMemoryShrinksByWhatItSays) {
  const Trained none = train(RecomputePlan{}, "mxfp8");
  EXPECT_EQ(none.memory.recomputed_bytes, 0);
  EXPECT_EQ(none.memory.region_bytes, 0);
  for (const RecomputePlan& plan : plans()) {
    const Trained r = train(plan, "mxfp8");
    const std::string what = plan.describe();
    EXPECT_GT(r.memory.region_bytes, 0) << what;
    EXPECT_GE(r.memory.recomputed_bytes, r.memory.region_bytes) << what;
    // tiny.json has one dense layer: mlp alone recomputes it into a region as large
    if (r.memory.recomputed_bytes > r.memory.region_bytes) {
      EXPECT_LT(r.activation_bytes, none.activation_bytes) << what;
    }
    // what leaves the kept activations is what the region holds instead; under mla_up_proj the
    // rotated rope key moves from the temporaries to the kept activations as well
    if (!plan.modules.has(RecomputeModule::kMlaUpProj)) {
      EXPECT_EQ(int64_t(none.activation_bytes - r.activation_bytes),
                r.memory.recomputed_bytes - r.memory.region_bytes)
          << what;
    }
    if (plan.granularity == RecomputeGranularity::kSelective) {
      int64_t modules = 0;
      for (RecomputeModule m : plan.modules.list()) {
        EXPECT_GT(r.memory.module_bytes[int(m)], 0) << what << ": " << recompute_module_name(m);
        modules += r.memory.module_bytes[int(m)];
      }
      EXPECT_EQ(modules, r.memory.recomputed_bytes) << what;
    }
  }
  // full, every layer alone: only the largest layer's activations are held at once
  const Trained all = train(full(RecomputeMethod::kUniform, 1), "mxfp8");
  const Trained pairs = train(full(RecomputeMethod::kUniform, 2), "mxfp8");
  EXPECT_EQ(all.memory.recomputed_bytes, pairs.memory.recomputed_bytes);
  EXPECT_GT(pairs.memory.region_bytes, all.memory.region_bytes);
}

TEST(Recompute, PlansNameTheirGroups) {
  const RecomputePlan u2 = full(RecomputeMethod::kUniform, 2),
                      b1 = full(RecomputeMethod::kBlock, 1);
  EXPECT_EQ(u2.group_start(0, 5), 0);
  EXPECT_EQ(u2.group_start(1, 5), 0);
  EXPECT_EQ(u2.group_start(4, 5), 4);
  EXPECT_EQ(b1.group_start(0, 5), 0);
  EXPECT_EQ(b1.group_start(1, 5), -1);
  EXPECT_EQ(selective({RecomputeModule::kCoreAttn}).group_start(0, 5), -1);
  EXPECT_EQ(selective({RecomputeModule::kLayernorm, RecomputeModule::kMoeAct}).describe(),
            "selective (moe_act layernorm)");
}

}  // namespace
}  // namespace moet
