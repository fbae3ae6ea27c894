// The model variants configs/tiny.json does not exercise, each against golden files of the
// independent PyTorch reference (reference/make_golden.py, float64) written from its own config
// in tests/variants/: tied embeddings, MTP depth 2, no MTP, no shared expert, all-dense (dense
// MTP too), no YaRN, and ungrouped routing without top-k normalisation. CTest writes the files
// first (golden_files_variant_*).
//
// One forward/backward on the reference's parameters and tokens: the loss and its parts to 1e-5
// (relative), the logits and every element of every parameter gradient to 1e-4 of the tensor's
// scale: max |moet − reference| / max |reference| per tensor. fp32 against float64 lands near
// 1e-6 (worst gradient element 1.3e-6, logits 4e-7, losses 4e-8; printed per variant).
//
// Then the reference's 10 AdamW steps (accumulation, clipping, expert-bias update): a looser
// check, since fp32 against float64 may choose other experts where the reference's routing
// margin is tiny. In tied_embeddings step 5 has a margin of 2.7e-6 and routes one token
// otherwise: the loss curve moves by up to 1.3e-4 from then on and 2 of 48 expert biases end 3γ
// apart. Bounds: loss and LM loss per step 1e-3 (relative), 90% of the biases equal, none more
// than 4γ apart. (Steps 0-4 agree to 2e-7 there — the optimizer sees the same gradients.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "golden_util.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;
constexpr double kLossTol = 1e-5, kLogitsTol = 1e-4, kGradTol = 1e-4, kTrainLossTol = 1e-3;

// The variant's config, the spec and its golden directory; a model with the golden parameters.
class GoldenVariant : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cfg = load_model_config(kRoot + "/tests/variants/" + GetParam() + ".json");
    spec = golden::spec();
    B = spec["micro_batch"].get<int64_t>();
    T = spec["seq"].get<int64_t>();
    dir = std::string(MOET_BINARY_DIR) + "/golden/variant-" + GetParam();
    model = std::make_unique<Model>(
        cfg, ModelSpec{.micro_batch = B, .seq_len = T, .loss_weights = golden::loss_weights(spec)});
    golden::load_parameters(*model, SafetensorsReader(dir + "/params.safetensors"));
  }
  ModelConfig cfg;
  nlohmann::json spec;
  int64_t B = 0, T = 0;
  std::string dir;
  std::unique_ptr<Model> model;
};

TEST_P(GoldenVariant, LossLogitsAndEveryGradientElement) {
  SafetensorsReader step(dir + "/step.safetensors");
  Model& m = *model;
  std::vector<int32_t> tokens = step.read_i32("tokens");
  ASSERT_EQ(int64_t(tokens.size()), B * (T + 1));

  m.params().zero_grads();
  const LossBreakdown l = m.forward(tokens.data());
  const double loss_err = golden::loss_error(l, step);
  EXPECT_LT(loss_err, kLossTol);
  std::vector<float> logits = step.read_f32("logits"), mine(logits.size());
  ASSERT_EQ(int64_t(logits.size()), B * T * cfg.vocab_size);
  Tensor mine_t(mine.data(), DType::F32, {B * T, cfg.vocab_size});
  m.logits(mine_t);
  const double logit_err = golden::max_abs_error(mine.data(), logits.data(), logits.size());
  EXPECT_LT(logit_err, kLogitsTol);

  m.backward(1.0);
  const golden::GradientReport r = golden::compare_gradients(m, step);
  int64_t elements = 0;
  for (const golden::GradientError& e : r.tensors) {
    EXPECT_LT(e.max_abs, kGradTol) << GetParam() << ": grad." << e.name;
    elements += e.numel;
  }
  ASSERT_FALSE(r.tensors.empty());
  const golden::GradientError* worst = r.worst_max_abs();
  std::printf(
      "%s: loss error %.1e, logits %.1e; %zu gradients (%lld elements), worst %.1e (%s), all "
      "%.1e (normalized)\n",
      GetParam().c_str(), loss_err, logit_err, r.tensors.size(), (long long)elements,
      worst->max_abs, worst->name.c_str(), r.all_normalized);
}

TEST_P(GoldenVariant, TenAdamWStepsWithAccumulationAndBiasUpdate) {
  SafetensorsReader train(dir + "/train.safetensors");
  Model& m = *model;
  const golden::TrainReport r = golden::replay_training(m, spec, train, B, T);
  for (size_t s = 0; s < r.loss_error.size(); ++s) {
    EXPECT_LT(r.loss_error[s], kTrainLossTol) << "step " << s;
    EXPECT_LT(r.lm_loss_error[s], kTrainLossTol) << "step " << s;
  }
  // a routing flip moves two biases apart by 2γ for good (and a few steps later maybe more)
  const double gamma = spec["bias_update_rate"].get<double>();
  EXPECT_GE(r.biases_equal, 0.9 * r.biases);
  EXPECT_LT(r.bias_worst, 4.5 * gamma);
  std::printf("%s, 10 steps: worst loss error %.1e; expert biases: %d of %d equal, worst %.0fγ\n",
              GetParam().c_str(), r.worst_loss_error(), r.biases_equal, r.biases,
              r.bias_worst / gamma);
}

// Every config in tests/variants/ (CMake writes the golden files of the same list).
std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(kRoot + "/tests/variants"))
    if (f.path().extension() == ".json") names.push_back(f.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(GoldenVariants, AllSevenConfigsAreThere) {
  EXPECT_EQ(variant_names(),
            (std::vector<std::string>{"all_dense", "mtp_depth2", "no_mtp", "no_shared_expert",
                                      "no_yarn", "tied_embeddings", "ungrouped_routing"}));
}

INSTANTIATE_TEST_SUITE_P(Variants, GoldenVariant, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace moet
