// config.json for Hugging Face directories: the one export_hf writes, the checks load_hf_config
// adds to moet's reader, and the comparison of a directory's config with a model's.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "checkpoint/hf.h"
#include "core/error.h"
#include "core/file_io.h"
#include "model/config_fields.h"

namespace moet {

namespace {

using ordered_json = nlohmann::ordered_json;

// The fields moet fixes (no ModelConfig member), each written after the model field it follows
// in DeepSeek's config.json: {after, key, value}.
struct FixedField {
  const char* after;
  const char* key;
  ordered_json value;
};

std::vector<FixedField> fixed_fields(const ModelConfig& c) {
  return {{"num_attention_heads", "num_key_value_heads", c.num_attention_heads},
          {"routed_scaling_factor", "scoring_func", "sigmoid"},
          {"routed_scaling_factor", "topk_method", "noaux_tc"},
          {"norm_topk_prob", "hidden_act", "silu"},
          // moet rotates interleaved pairs (docs/model.md), DeepSeek's layout.
          {"rope_scaling", "rope_interleave", true}};
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
  ordered_json fields = model_config_json(c);
  // transformers makes every layer from first_k_dense_replace on a MoE layer.
  if (c.n_routed_experts == 0) fields["first_k_dense_replace"] = c.num_hidden_layers;
  const std::vector<FixedField> fixed = fixed_fields(c);
  for (const auto& [key, value] : fields.items()) {
    j[key] = value;
    for (const FixedField& x : fixed)
      if (key == x.after) j[x.key] = x.value;
  }
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
  auto same = [&](const auto& d, const auto& a, const auto& b, const std::string& name) {
    MOET_CHECK(same_field(d, a, b), src, ": ", name, " is ", field_text(d, a),
               " but the model's is ", field_text(d, b));
  };
  for (const ModelConfigField& d : model_config_fields())
    if (is_model_size(d)) same(d, hf, m, d.key);
  bool any_dense = false, any_moe = false;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    MOET_CHECK(hf.is_moe_layer(l) == m.is_moe_layer(l), src, ": layer ", l, " is ",
               hf.is_moe_layer(l) ? "MoE" : "dense", " but the model's is ",
               m.is_moe_layer(l) ? "MoE" : "dense", " (first_k_dense_replace ",
               hf.first_k_dense_replace, " vs ", m.first_k_dense_replace, ")");
    (m.is_moe_layer(l) ? any_moe : any_dense) = true;
  }
  if (m.num_nextn_predict_layers > 0) (m.mtp_is_moe() ? any_moe : any_dense) = true;
  for (const ModelConfigField& d : model_config_fields()) {
    if (is_model_size(d) || !d.matched) continue;
    if ((d.scope == FieldScope::Dense && !any_dense) || (d.scope == FieldScope::Moe && !any_moe))
      continue;
    if (!std::holds_alternative<RopeScaling ModelConfig::*>(d.member)) {
      same(d, hf, m, d.key);
      continue;
    }
    const RopeScaling &a = hf.rope_scaling, &b = m.rope_scaling;
    MOET_CHECK(a.yarn == b.yarn, src, ": rope_scaling (yarn) is ", a.yarn ? "true" : "false",
               " but the model's is ", b.yarn ? "true" : "false");
    if (b.yarn)
      for (const RopeScalingField& e : rope_scaling_fields())
        same(e, a, b, std::string("rope_scaling.") + e.key);
  }
}

}  // namespace moet
