// Model config parsing and validation: the shipped configs load, and every bad config gets one
// clear error naming the problem.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

TEST(Config, ShippedConfigsLoad) {
  ModelConfig v3 = load_model_config(kRoot + "/configs/deepseek-v3-671b.json");
  EXPECT_EQ(v3.hidden_size, 7168);
  EXPECT_EQ(v3.n_routed_experts, 256);
  EXPECT_TRUE(v3.rope_scaling.yarn);
  EXPECT_DOUBLE_EQ(v3.rope_scaling.factor, 40.0);
  EXPECT_EQ(v3.num_moe_layers(), 58 + 1);
  // 671B in the main model; the MTP module adds ~11.5B (the hub's 685B also counts the MTP
  // module's own copies of the embedding and head, which moet shares).
  ModelConfig main_only = v3;
  main_only.num_nextn_predict_layers = 0;
  EXPECT_NEAR(double(count_parameters(main_only)) / 1e9, 671.0, 1.0);
  EXPECT_NEAR(double(count_parameters(v3) - count_parameters(main_only)) / 1e9, 11.5, 0.5);
  ModelConfig tiny = load_model_config(kRoot + "/configs/tiny.json");
  EXPECT_GE(tiny.n_routed_experts, 8);
  EXPECT_GE(tiny.n_group, 2);
  EXPECT_EQ(tiny.num_nextn_predict_layers, 1);
  ModelConfig small = load_model_config(kRoot + "/configs/small.json");
  double p = double(count_parameters(small)) / 1e6;
  EXPECT_GT(p, 50.0);
  EXPECT_LT(p, 100.0);
}

std::string tiny_with(const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(kRoot + "/configs/tiny.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  return j.dump();
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_model_config(text, "cfg.json");
    ADD_FAILURE() << "accepted a bad config; expected an error mentioning: " << needle;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(Config, BadConfigsGetOneClearLine) {
  expect_error("{not json", "not valid JSON");
  expect_error(tiny_with([](auto& j) { j.erase("hidden_size"); }),
               "missing required field 'hidden_size'");
  expect_error(tiny_with([](auto& j) { j["hidden_size"] = "64"; }),
               "'hidden_size' must be an integer");
  expect_error(tiny_with([](auto& j) { j["n_group"] = 3; }), "divisible by n_group");
  expect_error(tiny_with([](auto& j) { j["topk_group"] = 5; }), "must not exceed n_group");
  expect_error(tiny_with([](auto& j) { j["num_experts_per_tok"] = 9; }),
               "exceeds the 8 experts in the topk_group (2) kept groups");
  expect_error(tiny_with([](auto& j) { j["qk_rope_head_dim"] = 7; }), "must be even");
  expect_error(tiny_with([](auto& j) { j["scoring_func"] = "softmax"; }), "scoring_func");
  expect_error(tiny_with([](auto& j) { j["vocab_size"] = 0; }), "'vocab_size' must be positive");
  expect_error(tiny_with([](auto& j) { j["rope_scaling"]["type"] = "ntk"; }), "not supported");
  expect_error(tiny_with([](auto& j) { j["rope_scaling"].erase("factor"); }), "'factor'");
  expect_error(tiny_with([](auto& j) { j["num_key_value_heads"] = 2; }), "num_key_value_heads");
  EXPECT_THROW(load_model_config(kRoot + "/configs/no-such.json"), Error);
  // a field that sizes the model has no default; a defaulted value is named as one
  expect_error(tiny_with([](auto& j) { j.erase("n_routed_experts"); }),
               "missing required field 'n_routed_experts' (the routed experts of each MoE layer, "
               "0 for a dense model");
  expect_error(tiny_with([](auto& j) { j.erase("num_experts_per_tok"); }),
               "missing required field 'num_experts_per_tok'");
  expect_error(tiny_with([](auto& j) {
                 j.erase("n_group");
                 j["n_routed_experts"] = 12;
               }),
               "must be divisible by n_group (8, transformers' default: the config does not set "
               "n_group)");
}

// transformers 5 saves rope_theta and the YaRN scaling together as rope_parameters.
TEST(Config, TransformersFiveRopeParameters) {
  const ModelConfig legacy = parse_model_config(tiny_with([](auto&) {}), "cfg.json");
  const ModelConfig v5 = parse_model_config(tiny_with([](auto& j) {
                                              j["rope_parameters"] = j["rope_scaling"];
                                              j["rope_parameters"].erase("type");
                                              j["rope_parameters"]["rope_type"] = "yarn";
                                              j["rope_parameters"]["rope_theta"] = 50000;
                                              j.erase("rope_scaling");
                                              j.erase("rope_theta");
                                            }),
                                            "cfg.json");
  EXPECT_TRUE(v5.rope_scaling.yarn);
  EXPECT_EQ(v5.rope_theta, 50000);
  EXPECT_EQ(v5.rope_scaling.factor, legacy.rope_scaling.factor);
  EXPECT_EQ(v5.rope_scaling.original_max_position_embeddings,
            legacy.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(v5.rope_scaling.mscale_all_dim, legacy.rope_scaling.mscale_all_dim);
  // both forms, as transformers 5 keeps them when it re-saves a legacy config: they must agree
  const ModelConfig both = parse_model_config(tiny_with([](auto& j) {
                                                j["rope_parameters"] = j["rope_scaling"];
                                                j["rope_parameters"]["rope_theta"] = 10000;
                                              }),
                                              "cfg.json");
  EXPECT_EQ(both.rope_scaling.factor, legacy.rope_scaling.factor);
  const ModelConfig plain =
      parse_model_config(tiny_with([](auto& j) {
                           j.erase("rope_scaling");
                           j.erase("rope_theta");
                           j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000}};
                         }),
                         "cfg.json");
  EXPECT_FALSE(plain.rope_scaling.yarn);
  EXPECT_EQ(plain.rope_theta, 20000);
  expect_error(tiny_with([](auto& j) {
                 j["rope_parameters"] = j["rope_scaling"];
                 j["rope_parameters"]["factor"] = 8;
               }),
               "rope_scaling and rope_parameters describe different");
  expect_error(tiny_with([](auto& j) {
                 j["rope_parameters"] = {{"rope_theta", 5}};
               }),
               "rope_theta (10000) differs from rope_parameters.rope_theta (5)");
  expect_error(tiny_with([](auto& j) { j["rope_scaling"]["attention_factor"] = 1.5; }),
               "attention_factor is not supported");
  expect_error(tiny_with([](auto& j) { j["rope_scaling"]["truncate"] = false; }),
               "truncate=false is not supported");
}

}  // namespace
}  // namespace moet
