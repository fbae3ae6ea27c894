// The C++ model against golden files written by the independent PyTorch reference
// (reference/make_golden.py, float64): logits, losses, every parameter gradient, and 10 AdamW
// steps with gradient accumulation and the expert-bias update. CTest generates the files first.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/safetensors.h"
#include "model/model.h"
#include "train/train_step.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;
const std::string kGolden = std::string(MOET_BINARY_DIR) + "/golden/tiny";

nlohmann::json golden_spec() {
  std::ifstream in(kRoot + "/reference/golden_spec.json");
  return nlohmann::json::parse(in);
}

// ||a - b|| / ||b||  (absolute when b is all zeros)
double normalized_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

LossWeights loss_weights(const nlohmann::json& s) {
  return LossWeights{s["mtp_lambda"].get<double>(), s["balance_alpha"].get<double>(),
                     s["z_loss_coef"].get<double>()};
}

void load_parameters(Model& m, const SafetensorsReader& r) {
  std::set<std::string> file_names;
  for (const std::string& n : r.names()) file_names.insert(n);
  for (const auto& [name, slice] : m.params().names()) {
    ASSERT_TRUE(file_names.count(name)) << "golden params lack " << name;
    r.read_into(name, slice.value());
    file_names.erase(name);
  }
  EXPECT_TRUE(file_names.empty()) << "golden params has names the model lacks, e.g. "
                                  << *file_names.begin();
  m.params().mark_updated();
}

class Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg = load_model_config(kRoot + "/configs/tiny.json");
    spec = golden_spec();
    B = spec["micro_batch"].get<int64_t>();
    T = spec["seq"].get<int64_t>();
  }
  ModelConfig cfg;
  nlohmann::json spec;
  int64_t B = 0, T = 0;
};

TEST_F(Golden, LogitsLossesAndEveryGradient) {
  SafetensorsReader params(kGolden + "/params.safetensors");
  SafetensorsReader step(kGolden + "/step.safetensors");
  Model m(cfg, B, T, loss_weights(spec));
  load_parameters(m, params);
  std::vector<int32_t> tokens = step.read_i32("tokens");
  ASSERT_EQ(int64_t(tokens.size()), B * (T + 1));

  m.params().zero_grads();
  LossBreakdown l = m.forward(tokens.data());
  std::vector<float> logits = step.read_f32("logits"), mine(logits.size());
  ASSERT_EQ(int64_t(logits.size()), B * T * cfg.vocab_size);
  Tensor mine_t(mine.data(), DType::F32, {B * T, cfg.vocab_size});
  m.logits(mine_t);
  const double logit_err = normalized_error(mine.data(), logits.data(), logits.size());
  EXPECT_LT(logit_err, 1e-5);
  EXPECT_LT(rel(l.loss, step.read_f32("loss")[0]), 1e-5);
  EXPECT_LT(rel(l.lm_loss, step.read_f32("lm_loss")[0]), 1e-5);
  EXPECT_LT(rel(l.mtp_loss, step.read_f32("mtp_loss")[0]), 1e-5);
  EXPECT_LT(rel(l.balance_loss, step.read_f32("balance_loss")[0]), 1e-5);
  EXPECT_LT(rel(l.z_loss, step.read_f32("z_loss")[0]), 1e-5);

  m.backward(1.0);
  int checked = 0;
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, slice] : m.params().names()) {
    if (!slice.weight->trainable) continue;
    std::vector<float> g = step.read_f32("grad." + name);
    Tensor mine = slice.grad();
    ASSERT_EQ(int64_t(g.size()), mine.numel()) << name;
    const double err = normalized_error(mine.f32(), g.data(), g.size());
    EXPECT_LT(err, 1e-4) << name;
    if (err > worst) worst = err, worst_name = name;
    ++checked;
  }
  EXPECT_GT(checked, 50);
  std::printf("logits error %.2e, loss error %.2e; %d gradients, worst %.2e (%s)\n", logit_err,
              rel(l.loss, step.read_f32("loss")[0]), checked, worst, worst_name.c_str());
}

TEST_F(Golden, TenAdamWStepsWithAccumulationAndBiasUpdate) {
  SafetensorsReader params(kGolden + "/params.safetensors");
  SafetensorsReader train(kGolden + "/train.safetensors");
  Model m(cfg, B, T, loss_weights(spec));
  load_parameters(m, params);
  const int64_t steps = spec["steps"].get<int64_t>(), A = spec["grad_accum"].get<int64_t>();
  LrSchedule sched;
  sched.kind = parse_schedule_kind(spec["schedule"].get<std::string>());
  sched.max_lr = spec["lr"].get<double>();
  sched.min_lr = sched.max_lr * spec["min_lr_ratio"].get<double>();
  sched.warmup = spec["warmup"].get<int64_t>();
  sched.total = steps;
  AdamWConfig oc;
  oc.beta1 = spec["beta1"].get<double>();
  oc.beta2 = spec["beta2"].get<double>();
  oc.eps = spec["eps"].get<double>();
  oc.weight_decay = spec["weight_decay"].get<double>();
  oc.grad_clip = spec["grad_clip"].get<double>();
  StepRunner runner(m, oc, sched, spec["bias_update_rate"].get<double>());

  std::vector<int32_t> tokens = train.read_i32("tokens");
  ASSERT_EQ(int64_t(tokens.size()), steps * A * B * (T + 1));
  std::vector<float> losses = train.read_f32("losses");
  std::vector<float> lm_losses = train.read_f32("lm_losses");
  double worst = 0;
  for (int64_t s = 0; s < steps; ++s) {
    StepResult r =
        runner.run(s, A, [&](int64_t a) { return tokens.data() + (s * A + a) * B * (T + 1); });
    EXPECT_LT(rel(r.losses.loss, losses[s]), 1e-4) << "step " << s;
    worst = std::max(worst, rel(r.losses.loss, losses[s]));
    EXPECT_LT(rel(r.losses.lm_loss, lm_losses[s]), 1e-4) << "step " << s;
  }
  int layers = 0;
  for (const std::string& name : train.names()) {
    if (name.rfind("bias.", 0) != 0) continue;
    // bias.<layer index>: that layer's e_score_correction_bias after the last step
    std::string pname = "model.layers." + name.substr(5) + ".mlp.gate.e_score_correction_bias";
    std::vector<float> want = train.read_f32(name);
    Tensor mine = m.params().named(pname).value();
    ASSERT_EQ(int64_t(want.size()), mine.numel());
    for (size_t e = 0; e < want.size(); ++e)
      EXPECT_NEAR(mine.f32()[e], want[e], 1e-6) << pname << " expert " << e;
    ++layers;
  }
  EXPECT_EQ(layers, int(m.moe_layers().size()));
  std::printf("10 steps: worst loss error %.2e\n", worst);
}

}  // namespace
}  // namespace moet
