#include "cli/config_commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/config.h"

namespace moet::cli {

CLI::App* add_config_command(CLI::App& app, ConfigArgs& a) {
  CLI::App* c = app.add_subcommand(
      "config", "the model a config.json builds: every field as moet reads it, and its size");
  c->add_option("config", a.path, "a DeepSeek-V3 config.json")->required();
  c->add_flag("--json", a.json, "print the fields as JSON (Hugging Face names)");
  return c;
}

void run_config(const ConfigArgs& a) {
  const ModelConfig c = load_model_config(a.path);
  nlohmann::ordered_json j;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["num_attention_heads"] = c.num_attention_heads;
  j["q_lora_rank"] = c.q_lora_rank;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.yarn)
    j["rope_scaling"] = {
        {"type", "yarn"},
        {"factor", c.rope_scaling.factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
        {"beta_fast", c.rope_scaling.beta_fast},
        {"beta_slow", c.rope_scaling.beta_slow},
        {"mscale", c.rope_scaling.mscale},
        {"mscale_all_dim", c.rope_scaling.mscale_all_dim}};
  else
    j["rope_scaling"] = nullptr;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = c.initializer_range;
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: %.1fM parameters, %lld layers (%lld MoE), %lld routed experts top-%lld\n",
              a.path.c_str(), double(count_parameters(c)) / 1e6, (long long)c.num_hidden_layers,
              (long long)c.num_moe_layers(), (long long)c.n_routed_experts,
              (long long)c.num_experts_per_tok);
  for (const auto& [k, v] : j.items()) std::printf("  %s: %s\n", k.c_str(), v.dump().c_str());
}

}  // namespace moet::cli
