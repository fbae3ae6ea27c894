// What the golden-file tests share (test_golden.cpp, test_golden_variants.cpp): the spec, the
// error measures, loading a golden params file into a Model, comparing the losses and every
// parameter gradient of one forward/backward with the reference's step file, and replaying the
// reference's training run.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "model/model.h"
#include "train/train_step.h"

namespace moet::golden {

// reference/golden_spec.json: batch, sequence, loss weights and the training recipe.
inline nlohmann::json spec() {
  std::ifstream in(std::string(MOET_SOURCE_DIR) + "/reference/golden_spec.json");
  return nlohmann::json::parse(in);
}

inline LossWeights loss_weights(const nlohmann::json& s) {
  return LossWeights{s["mtp_lambda"].get<double>(), s["balance_alpha"].get<double>(),
                     s["z_loss_coef"].get<double>()};
}

// ||a - b|| / ||b||  (absolute when b is all zeros)
inline double normalized_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// max |a - b| / max |b|: the worst element against the tensor's scale (absolute when b is all
// zeros).
inline double max_abs_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// |a - b| / |b|; a golden value of zero must be met exactly.
inline double rel(double a, double b) {
  if (b == 0) return a == 0 ? 0.0 : HUGE_VAL;
  return std::abs(a - b) / std::abs(b);
}

// Copies every tensor of a golden params file into m by Hugging Face name; the file and the
// model must hold the same names.
inline void load_parameters(Model& m, const SafetensorsReader& r) {
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

// The worst relative error of the loss and its four parts against the step file.
inline double loss_error(const LossBreakdown& l, const SafetensorsReader& step) {
  const std::pair<double, const char*> parts[] = {{l.loss, "loss"},
                                                  {l.lm_loss, "lm_loss"},
                                                  {l.mtp_loss, "mtp_loss"},
                                                  {l.balance_loss, "balance_loss"},
                                                  {l.z_loss, "z_loss"}};
  double worst = 0;
  for (const auto& [mine, name] : parts) {
    const double e = rel(mine, step.read_f32(name)[0]);
    EXPECT_FALSE(std::isnan(e)) << name;
    worst = std::max(worst, e);
  }
  return worst;
}

// One parameter's gradient against the step file's grad.<name>.
struct GradientError {
  std::string name;
  int64_t numel = 0;
  double normalized = 0;  // normalized_error
  double max_abs = 0;     // max_abs_error
};

struct GradientReport {
  std::vector<GradientError> tensors;  // every trainable parameter, in name order
  double all_normalized = 0;           // normalized_error over all gradients together
  const GradientError* worst_normalized() const {
    return &*std::max_element(tensors.begin(), tensors.end(),
                              [](auto& a, auto& b) { return a.normalized < b.normalized; });
  }
  const GradientError* worst_max_abs() const {
    return &*std::max_element(tensors.begin(), tensors.end(),
                              [](auto& a, auto& b) { return a.max_abs < b.max_abs; });
  }
};

// Every trainable parameter's gradient of m (after backward) against the step file; the file's
// grad.* names (or `prefix`'s, e.g. "grad_mean.") must be exactly the model's trainable
// parameters.
inline GradientReport compare_gradients(Model& m, const SafetensorsReader& step,
                                        const std::string& prefix = "grad.") {
  GradientReport r;
  std::set<std::string> file_grads;
  for (const std::string& n : step.names())
    if (n.rfind(prefix, 0) == 0) file_grads.insert(n.substr(prefix.size()));
  double num = 0, den = 0;
  for (const auto& [name, slice] : m.params().names()) {
    if (!slice.weight->trainable) continue;
    EXPECT_TRUE(file_grads.erase(name)) << "golden step lacks " << prefix << name;
    if (!step.contains(prefix + name)) continue;
    std::vector<float> g = step.read_f32(prefix + name);
    Tensor mine = slice.grad();
    EXPECT_EQ(int64_t(g.size()), mine.numel()) << name;
    if (int64_t(g.size()) != mine.numel()) continue;
    const float* a = mine.f32();
    r.tensors.push_back({name, mine.numel(), normalized_error(a, g.data(), g.size()),
                         max_abs_error(a, g.data(), g.size())});
    for (size_t i = 0; i < g.size(); ++i)
      num += std::pow(double(a[i]) - g[i], 2), den += double(g[i]) * g[i];
  }
  EXPECT_TRUE(file_grads.empty()) << "golden step has gradients of parameters the model lacks, "
                                  << "e.g. " << *file_grads.begin();
  EXPECT_FALSE(r.tensors.empty());
  r.all_normalized = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return r;
}

// The training run of train.safetensors from the loaded parameters: spec["steps"] AdamW steps of
// spec["grad_accum"] micro-batches each, with the expert-bias update; then the expert biases.
struct TrainReport {
  std::vector<double> loss_error, lm_loss_error;      // rel() per step
  int bias_layers = 0, biases = 0, biases_equal = 0;  // equal: within 1e-6
  double bias_worst = 0;                              // largest |moet − reference| bias
  double worst_loss_error() const {
    return loss_error.empty() ? 0.0 : *std::max_element(loss_error.begin(), loss_error.end());
  }
};

inline TrainReport replay_training(Model& m, const nlohmann::json& spec,
                                   const SafetensorsReader& train, int64_t B, int64_t T) {
  TrainReport rep;
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
  EXPECT_EQ(int64_t(tokens.size()), steps * A * B * (T + 1));
  if (int64_t(tokens.size()) != steps * A * B * (T + 1)) return rep;
  std::vector<float> losses = train.read_f32("losses");
  std::vector<float> lm_losses = train.read_f32("lm_losses");
  for (int64_t s = 0; s < steps; ++s) {
    StepResult r =
        runner.run(s, A, [&](int64_t a) { return tokens.data() + (s * A + a) * B * (T + 1); });
    rep.loss_error.push_back(rel(r.losses.loss, losses[s]));
    rep.lm_loss_error.push_back(rel(r.losses.lm_loss, lm_losses[s]));
  }
  for (const std::string& name : train.names()) {
    if (name.rfind("bias.", 0) != 0) continue;
    // bias.<layer index>: that layer's e_score_correction_bias after the last step
    std::string pname = "model.layers." + name.substr(5) + ".mlp.gate.e_score_correction_bias";
    std::vector<float> want = train.read_f32(name);
    Tensor mine = m.params().named(pname).value();
    EXPECT_EQ(int64_t(want.size()), mine.numel()) << pname;
    for (size_t e = 0; e < want.size() && int64_t(e) < mine.numel(); ++e) {
      const double d = std::abs(double(mine.f32()[e]) - want[e]);
      rep.biases_equal += d < 1e-6;
      rep.bias_worst = std::max(rep.bias_worst, d);
      ++rep.biases;
    }
    ++rep.bias_layers;
  }
  EXPECT_EQ(rep.bias_layers, int(m.moe_layers().size()));
  return rep;
}

}  // namespace moet::golden
