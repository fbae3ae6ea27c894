#include "model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace moet {

namespace {

using nlohmann::json;

// Reads fields with one clear message per problem: "<file>: field 'x' ...".
class FieldReader {
 public:
  FieldReader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  int64_t integer(const char* name) const {
    const json& v = required(name);
    MOET_CHECK(v.is_number_integer(), source_, ": field '", name, "' must be an integer, got ",
               v.dump());
    return v.get<int64_t>();
  }
  int64_t integer_or(const char* name, int64_t fallback) const {
    return has(name) ? integer(name) : fallback;
  }
  double number(const char* name) const {
    const json& v = required(name);
    MOET_CHECK(v.is_number(), source_, ": field '", name, "' must be a number, got ", v.dump());
    return v.get<double>();
  }
  double number_or(const char* name, double fallback) const {
    return has(name) ? number(name) : fallback;
  }
  bool boolean_or(const char* name, bool fallback) const {
    if (!has(name)) return fallback;
    const json& v = j_.at(name);
    MOET_CHECK(v.is_boolean(), source_, ": field '", name, "' must be true or false, got ",
               v.dump());
    return v.get<bool>();
  }
  std::string string_or(const char* name, const std::string& fallback) const {
    if (!has(name)) return fallback;
    const json& v = j_.at(name);
    MOET_CHECK(v.is_string(), source_, ": field '", name, "' must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  bool has(const char* name) const { return j_.contains(name) && !j_.at(name).is_null(); }

 private:
  const json& required(const char* name) const {
    MOET_CHECK(has(name), source_, ": missing required field '", name, "'");
    return j_.at(name);
  }
  const json& j_;
  std::string source_;
};

void check_positive(const std::string& src, const char* name, int64_t v) {
  MOET_CHECK(v > 0, src, ": field '", name, "' must be positive, got ", v);
}

// `field`: "rope_scaling" (DeepSeek's and transformers 4's config.json) or "rope_parameters"
// (transformers 5's, which also holds rope_theta).
RopeScaling parse_rope_scaling(const json& j, const std::string& src, const char* field) {
  RopeScaling r;
  MOET_CHECK(j.is_object(), src, ": field '", field, "' must be an object or null");
  FieldReader f(j, src + " " + field);
  std::string type = f.string_or("rope_type", f.string_or("type", "default"));
  if (type == "default") return r;
  MOET_CHECK(type == "yarn", src, ": ", field, " type '", type,
             "' is not supported (moet implements 'yarn')");
  // transformers' YaRN options that moet does not implement: refuse rather than differ.
  MOET_CHECK(!f.has("attention_factor"), src, ": ", field,
             ".attention_factor is not supported (moet derives it from mscale/mscale_all_dim)");
  MOET_CHECK(f.boolean_or("truncate", true), src, ": ", field,
             ".truncate=false is not supported (moet rounds the YaRN correction range)");
  r.yarn = true;
  r.factor = f.number("factor");
  MOET_CHECK(r.factor >= 1.0, src, ": rope_scaling.factor must be >= 1, got ", r.factor);
  r.original_max_position_embeddings = f.integer("original_max_position_embeddings");
  check_positive(src, "rope_scaling.original_max_position_embeddings",
                 r.original_max_position_embeddings);
  r.beta_fast = f.number_or("beta_fast", 32.0);
  r.beta_slow = f.number_or("beta_slow", 1.0);
  r.mscale = f.number_or("mscale", 0.0);
  r.mscale_all_dim = f.number_or("mscale_all_dim", 0.0);
  return r;
}

bool same_rope_scaling(const RopeScaling& a, const RopeScaling& b) {
  return a.yarn == b.yarn && a.factor == b.factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim;
}

void validate(const ModelConfig& c, const std::string& src) {
  check_positive(src, "vocab_size", c.vocab_size);
  check_positive(src, "hidden_size", c.hidden_size);
  check_positive(src, "num_hidden_layers", c.num_hidden_layers);
  check_positive(src, "num_attention_heads", c.num_attention_heads);
  check_positive(src, "q_lora_rank", c.q_lora_rank);
  check_positive(src, "kv_lora_rank", c.kv_lora_rank);
  check_positive(src, "qk_nope_head_dim", c.qk_nope_head_dim);
  check_positive(src, "qk_rope_head_dim", c.qk_rope_head_dim);
  check_positive(src, "v_head_dim", c.v_head_dim);
  MOET_CHECK(c.qk_rope_head_dim % 2 == 0, src,
             ": qk_rope_head_dim must be even (RoPE rotates pairs), got ", c.qk_rope_head_dim);
  MOET_CHECK(c.rms_norm_eps > 0, src, ": rms_norm_eps must be positive");
  MOET_CHECK(c.rope_theta > 0, src, ": rope_theta must be positive");
  MOET_CHECK(c.initializer_range > 0, src, ": initializer_range must be positive");
  MOET_CHECK(c.first_k_dense_replace >= 0, src, ": first_k_dense_replace must be >= 0");
  MOET_CHECK(c.num_nextn_predict_layers >= 0, src, ": num_nextn_predict_layers must be >= 0");
  bool any_dense = c.first_k_dense_replace > 0 || c.n_routed_experts == 0;
  if (any_dense) check_positive(src, "intermediate_size", c.intermediate_size);
  if (c.n_routed_experts > 0 && c.first_k_dense_replace < c.num_hidden_layers) {
    check_positive(src, "moe_intermediate_size", c.moe_intermediate_size);
    check_positive(src, "num_experts_per_tok", c.num_experts_per_tok);
    check_positive(src, "n_group", c.n_group);
    check_positive(src, "topk_group", c.topk_group);
    MOET_CHECK(c.n_shared_experts >= 0, src, ": n_shared_experts must be >= 0");
    MOET_CHECK(c.n_routed_experts % c.n_group == 0, src, ": n_routed_experts (", c.n_routed_experts,
               ") must be divisible by n_group (", c.n_group, ")");
    MOET_CHECK(c.topk_group <= c.n_group, src, ": topk_group (", c.topk_group,
               ") must not exceed n_group (", c.n_group, ")");
    int64_t kept = c.topk_group * (c.n_routed_experts / c.n_group);
    MOET_CHECK(c.num_experts_per_tok <= kept, src, ": num_experts_per_tok (", c.num_experts_per_tok,
               ") exceeds the ", kept, " experts in the topk_group kept groups");
    MOET_CHECK(c.routed_scaling_factor > 0, src, ": routed_scaling_factor must be positive");
  }
}

}  // namespace

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) n += is_moe_layer(l);
  if (mtp_is_moe()) n += num_nextn_predict_layers;
  return n;
}

ModelConfig parse_model_config(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    MOET_FAIL(src, ": not valid JSON (", e.what(), ")");
  }
  MOET_CHECK(j.is_object(), src, ": a model config must be a JSON object");
  FieldReader f(j, src);
  ModelConfig c;
  std::string mt = f.string_or("model_type", "deepseek_v3");
  MOET_CHECK(mt == "deepseek_v3" || mt == "deepseek_v2", src, ": model_type '", mt,
             "' is not a DeepSeek-V3 family model");
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  c.q_lora_rank = f.integer("q_lora_rank");
  c.kv_lora_rank = f.integer("kv_lora_rank");
  c.qk_nope_head_dim = f.integer("qk_nope_head_dim");
  c.qk_rope_head_dim = f.integer("qk_rope_head_dim");
  c.v_head_dim = f.integer("v_head_dim");
  c.n_routed_experts = f.integer_or("n_routed_experts", 0);
  c.first_k_dense_replace = f.integer_or("first_k_dense_replace", 0);
  c.intermediate_size = f.integer_or("intermediate_size", 0);
  c.moe_intermediate_size = f.integer_or("moe_intermediate_size", 0);
  c.n_shared_experts = f.integer_or("n_shared_experts", 0);
  c.num_experts_per_tok = f.integer_or("num_experts_per_tok", 0);
  c.n_group = f.integer_or("n_group", 1);
  c.topk_group = f.integer_or("topk_group", 1);
  c.routed_scaling_factor = f.number_or("routed_scaling_factor", 1.0);
  c.norm_topk_prob = f.boolean_or("norm_topk_prob", true);
  c.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  c.rope_theta = f.number_or("rope_theta", 10000.0);
  // transformers 5 writes rope_parameters (with rope_theta inside) instead of rope_theta and
  // rope_scaling; when both forms are present they must agree.
  if (f.has("rope_parameters")) {
    const json& rp = j.at("rope_parameters");
    c.rope_scaling = parse_rope_scaling(rp, src, "rope_parameters");
    FieldReader rf(rp, src + " rope_parameters");
    if (rf.has("rope_theta")) {
      const double theta = rf.number("rope_theta");
      MOET_CHECK(!f.has("rope_theta") || f.number("rope_theta") == theta, src, ": rope_theta (",
                 f.number("rope_theta"), ") differs from rope_parameters.rope_theta (", theta, ")");
      c.rope_theta = theta;
    }
  }
  c.max_position_embeddings = f.integer_or("max_position_embeddings", 4096);
  c.num_nextn_predict_layers = f.integer_or("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  c.initializer_range = f.number_or("initializer_range", 0.02);
  if (f.has("rope_scaling")) {
    RopeScaling r = parse_rope_scaling(j.at("rope_scaling"), src, "rope_scaling");
    MOET_CHECK(!f.has("rope_parameters") || same_rope_scaling(r, c.rope_scaling), src,
               ": rope_scaling and rope_parameters describe different RoPE scalings");
    c.rope_scaling = r;
  }
  std::string scoring = f.string_or("scoring_func", "sigmoid");
  MOET_CHECK(scoring == "sigmoid", src, ": scoring_func '", scoring,
             "' is not supported (DeepSeek-V3 uses 'sigmoid')");
  std::string act = f.string_or("hidden_act", "silu");
  MOET_CHECK(act == "silu", src, ": hidden_act '", act, "' is not supported (use 'silu')");
  MOET_CHECK(!f.boolean_or("attention_bias", false), src, ": attention_bias=true is not supported");
  if (f.has("num_key_value_heads")) {
    int64_t kvh = f.integer("num_key_value_heads");
    MOET_CHECK(kvh == c.num_attention_heads, src, ": num_key_value_heads (", kvh,
               ") must equal num_attention_heads for MLA");
  }
  validate(c, src);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  MOET_CHECK(in.good(), "cannot open model config '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

int64_t count_parameters(const ModelConfig& c) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads;
  int64_t attn = D * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * H * c.qk_head_dim() +
                 D * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank +
                 c.kv_lora_rank * H * (c.qk_nope_head_dim + c.v_head_dim) + H * c.v_head_dim * D;
  int64_t dense_ffn = 3 * D * c.intermediate_size;
  int64_t moe_ffn = c.n_routed_experts * (3 * D * c.moe_intermediate_size + D) +
                    3 * D * c.shared_intermediate_size();
  auto block = [&](bool moe) { return attn + 2 * D + (moe ? moe_ffn : dense_ffn); };
  int64_t n = c.vocab_size * D * (c.tie_word_embeddings ? 1 : 2) + D;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n += block(c.is_moe_layer(l));
  n += c.num_nextn_predict_layers * (block(c.mtp_is_moe()) + 3 * D + 2 * D * D);
  return n;
}

}  // namespace moet
