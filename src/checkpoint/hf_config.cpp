// config.json for Hugging Face directories: the one export_hf writes, the checks load_hf_config
// adds to moet's reader, and the comparison of a directory's config with a model's.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "checkpoint/hf.h"
#include "core/error.h"
#include "core/file_io.h"

namespace moet {

namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json rope_scaling_json(const RopeScaling& r) {
  if (!r.yarn) return nullptr;
  // DeepSeek's own spelling ("type"), which transformers 4 and 5 both read.
  ordered_json j = {{"type", "yarn"},
                    {"factor", r.factor},
                    {"original_max_position_embeddings", r.original_max_position_embeddings},
                    {"beta_fast", r.beta_fast},
                    {"beta_slow", r.beta_slow}};
  if (r.mscale != 0.0) j["mscale"] = r.mscale;  // 0: not set (moet's and transformers' meaning)
  if (r.mscale_all_dim != 0.0) j["mscale_all_dim"] = r.mscale_all_dim;
  return j;
}

template <typename T>
auto shown(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return std::string(v ? "true" : "false");
  else
    return v;
}

}  // namespace

HfDType parse_hf_dtype(const std::string& name) {
  if (name == "bf16") return HfDType::BF16;
  if (name == "fp32") return HfDType::F32;
  MOET_FAIL("--dtype '", name, "' is not one of bf16, fp32");
}

std::string hf_config_json(const ModelConfig& c, const std::string& source_json,
                           const std::string& source_name, HfDType dtype) {
  ordered_json j;
  try {
    j = ordered_json::parse(source_json);
  } catch (const nlohmann::json::exception& e) {
    MOET_FAIL(source_name, ": not valid JSON (", e.what(), ")");
  }
  MOET_CHECK(j.is_object(), source_name, ": a model config must be a JSON object");
  // Fields that would contradict what is written: the source's storage format and its
  // transformers-5 RoPE object (rope_theta and rope_scaling below say the same).
  for (const char* stale : {"quantization_config", "rope_parameters", "dtype", "torch_dtype",
                            "transformers_version", "head_dim", "qk_head_dim"})
    j.erase(stale);
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  j["model_type"] = "deepseek_v3";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  // transformers makes every layer from first_k_dense_replace on a MoE layer.
  j["first_k_dense_replace"] =
      c.n_routed_experts > 0 ? c.first_k_dense_replace : c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
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
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  // moet rotates interleaved pairs (docs/model.md), DeepSeek's layout.
  j["rope_interleave"] = true;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["attention_bias"] = false;
  j["torch_dtype"] = dtype == HfDType::BF16 ? "bfloat16" : "float32";
  return j.dump(2) + "\n";
}

ModelConfig load_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const std::string text = read_text_file(path);
  ModelConfig c = parse_model_config(text, path);
  const nlohmann::json j = nlohmann::json::parse(text);  // valid: parse_model_config read it
  if (j.contains("architectures") && j["architectures"].is_array()) {
    bool causal_lm = false;
    for (const auto& a : j["architectures"]) causal_lm |= a == "DeepseekV3ForCausalLM";
    MOET_CHECK(causal_lm, path, ": architectures ", j["architectures"].dump(),
               " has no DeepseekV3ForCausalLM (the layout whose names start with 'model.')");
  }
  MOET_CHECK(!j.contains("rope_interleave") || j["rope_interleave"] != false, path,
             ": rope_interleave=false is not supported (moet's RoPE rotates interleaved pairs, "
             "DeepSeek's layout)");
  MOET_CHECK(!j.contains("quantization_config"), path,
             ": quantized checkpoints (quantization_config) are not supported; dequantize to "
             "bf16 first");
  return c;
}

void check_hf_config_matches(const ModelConfig& hf, const ModelConfig& m, const std::string& src) {
  auto same = [&](const char* field, auto a, auto b) {
    MOET_CHECK(a == b, src, ": ", field, " is ", shown(a), " but the model's is ", shown(b));
  };
  same("vocab_size", hf.vocab_size, m.vocab_size);
  same("hidden_size", hf.hidden_size, m.hidden_size);
  same("num_hidden_layers", hf.num_hidden_layers, m.num_hidden_layers);
  same("num_attention_heads", hf.num_attention_heads, m.num_attention_heads);
  same("q_lora_rank", hf.q_lora_rank, m.q_lora_rank);
  same("kv_lora_rank", hf.kv_lora_rank, m.kv_lora_rank);
  same("qk_nope_head_dim", hf.qk_nope_head_dim, m.qk_nope_head_dim);
  same("qk_rope_head_dim", hf.qk_rope_head_dim, m.qk_rope_head_dim);
  same("v_head_dim", hf.v_head_dim, m.v_head_dim);
  same("n_routed_experts", hf.n_routed_experts, m.n_routed_experts);
  bool any_dense = false, any_moe = false;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    MOET_CHECK(hf.is_moe_layer(l) == m.is_moe_layer(l), src, ": layer ", l, " is ",
               hf.is_moe_layer(l) ? "MoE" : "dense", " but the model's is ",
               m.is_moe_layer(l) ? "MoE" : "dense", " (first_k_dense_replace ",
               hf.first_k_dense_replace, " vs ", m.first_k_dense_replace, ")");
    (m.is_moe_layer(l) ? any_moe : any_dense) = true;
  }
  if (m.num_nextn_predict_layers > 0) (m.mtp_is_moe() ? any_moe : any_dense) = true;
  if (any_dense) same("intermediate_size", hf.intermediate_size, m.intermediate_size);
  if (any_moe) {
    same("moe_intermediate_size", hf.moe_intermediate_size, m.moe_intermediate_size);
    same("n_shared_experts", hf.n_shared_experts, m.n_shared_experts);
    same("num_experts_per_tok", hf.num_experts_per_tok, m.num_experts_per_tok);
    same("n_group", hf.n_group, m.n_group);
    same("topk_group", hf.topk_group, m.topk_group);
    same("routed_scaling_factor", hf.routed_scaling_factor, m.routed_scaling_factor);
    same("norm_topk_prob", hf.norm_topk_prob, m.norm_topk_prob);
  }
  same("rms_norm_eps", hf.rms_norm_eps, m.rms_norm_eps);
  same("rope_theta", hf.rope_theta, m.rope_theta);
  const RopeScaling &a = hf.rope_scaling, &b = m.rope_scaling;
  same("rope_scaling (yarn)", a.yarn, b.yarn);
  if (b.yarn) {
    same("rope_scaling.factor", a.factor, b.factor);
    same("rope_scaling.original_max_position_embeddings", a.original_max_position_embeddings,
         b.original_max_position_embeddings);
    same("rope_scaling.beta_fast", a.beta_fast, b.beta_fast);
    same("rope_scaling.beta_slow", a.beta_slow, b.beta_slow);
    same("rope_scaling.mscale", a.mscale, b.mscale);
    same("rope_scaling.mscale_all_dim", a.mscale_all_dim, b.mscale_all_dim);
  }
  same("tie_word_embeddings", hf.tie_word_embeddings, m.tie_word_embeddings);
}

}  // namespace moet
