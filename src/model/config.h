// ModelConfig: a DeepSeek-V3 model read from a Hugging Face config.json (same field names).
#pragma once
#include <cstdint>
#include <string>

namespace moet {

struct RopeScaling {
  bool yarn = false;  // rope_scaling.type == "yarn"
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0: not set
  double mscale_all_dim = 0.0;  // 0: not set
};

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  int64_t num_nextn_predict_layers = 0;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace;
  }
  // MTP blocks are MoE when the last main layer is.
  bool mtp_is_moe() const { return is_moe_layer(num_hidden_layers - 1); }
  int64_t num_moe_layers() const;  // main + MTP
  int64_t shared_intermediate_size() const { return moe_intermediate_size * n_shared_experts; }
};

// Parses and validates; throws moet::Error with one clear line naming the file and the field.
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source_name);

// Total parameter count (embedding and head included, MTP included).
int64_t count_parameters(const ModelConfig& c);

}  // namespace moet
