#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/suggest.h"
#include "core/warning.h"
#include "model/config_fields.h"

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
    if (!has(name)) defaulted_.insert(name);
    return has(name) ? integer(name) : fallback;
  }
  // A field without a sensible default: missing, it is refused, saying what it is for.
  int64_t integer_required(const char* name, const char* why) const {
    MOET_CHECK(has(name), source_, ": missing required field '", name, "' (", why, ")");
    return integer(name);
  }
  const std::set<std::string>& defaulted() const { return defaulted_; }
  double number(const char* name) const {
    const json& v = required(name);
    MOET_CHECK(v.is_number(), source_, ": field '", name, "' must be a number, got ", v.dump());
    return v.get<double>();
  }
  double number_or(const char* name, double fallback) const {
    if (!has(name)) defaulted_.insert(name);
    return has(name) ? number(name) : fallback;
  }
  bool boolean_or(const char* name, bool fallback) const {
    if (!has(name)) defaulted_.insert(name);
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
  mutable std::set<std::string> defaulted_;  // fields the config does not set
};

// Reads field d into r; `required`: a config without it is refused (saying d.why where given).
template <class Record>
void read_field(const FieldReader& f, const FieldDesc<Record>& d, Record& r, bool required) {
  std::visit(Overloaded{[&](int64_t Record::*m) {
                          r.*m = !required ? f.integer_or(d.key, int64_t(d.fallback))
                                 : d.why   ? f.integer_required(d.key, d.why)
                                           : f.integer(d.key);
                        },
                        [&](double Record::*m) {
                          r.*m = required ? f.number(d.key) : f.number_or(d.key, d.fallback);
                        },
                        [&](bool Record::*m) { r.*m = f.boolean_or(d.key, d.fallback != 0); },
                        [&](RopeScaling Record::*) {}},  // read_rope: two spellings
             d.member);
}

// Every field a DeepSeek-V3 config.json may hold without moet reading it wrongly: transformers'
// DeepseekV3Config (5.24: its arguments and to_dict()), PretrainedConfig's common attributes
// (transformers 4 and 5), and the fields of DeepSeek's own config.json. A key not among them
// is probably a misspelling: it gets a warning naming the nearest one.
const std::vector<std::string>& known_fields() {
  static const std::vector<std::string> k = {
      // DeepseekV3Config
      "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
      "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts",
      "n_routed_experts", "output_router_logits", "routed_scaling_factor", "kv_lora_rank",
      "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "qk_head_dim",
      "head_dim", "n_group", "topk_group", "num_experts_per_tok", "first_k_dense_replace",
      "norm_topk_prob", "hidden_act", "max_position_embeddings", "initializer_range",
      "rms_norm_eps", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "pretraining_tp",
      "tie_word_embeddings", "rope_parameters", "rope_interleave", "attention_bias",
      "attention_dropout", "num_mtp_layers", "num_nextn_predict_layers",
      // transformers 4 spellings and DeepSeek's config.json
      "rope_theta", "rope_scaling", "torch_dtype", "aux_loss_alpha", "ep_size", "moe_layer_freq",
      "scoring_func", "seq_aux", "topk_method", "quantization_config", "auto_map",
      // PretrainedConfig
      "architectures", "model_type", "transformers_version", "dtype", "_name_or_path",
      "name_or_path", "output_hidden_states", "output_attentions", "return_dict",
      "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "id2label", "label2id",
      "num_labels", "problem_type", "tokenizer_class", "prefix", "sep_token_id",
      "decoder_start_token_id", "task_specific_params", "finetuning_task", "add_cross_attention",
      "cross_attention_hidden_size", "tie_encoder_decoder", "torchscript", "pruned_heads",
      "use_bfloat16", "bad_words_ids", "max_length", "min_length", "do_sample", "early_stopping",
      "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
      "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
      "encoder_no_repeat_ngram_size", "num_return_sequences", "output_scores",
      "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
      "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens", "tf_legacy_loss", "use_return_dict"};
  return k;
}

// Warns once per source about each key that is no known field (moet::warn).
void warn_unknown_fields(const nlohmann::json& j, const std::string& src) {
  static std::mutex mu;
  static std::set<std::string> warned;  // "src\tkey"
  const auto& known = known_fields();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!warned.insert(src + "\t" + key).second) continue;
    }
    const std::string near = nearest_name(key, known);
    warn(str(src, ": unknown field '", key, "'",
             near.empty() ? " (moet does not read it)" : " (did you mean '" + near + "'?)"));
  }
}

// A field's value in a message, saying when it is no value of the config's own.
struct Shown {
  const std::set<std::string>* defaulted;
  std::string operator()(const char* name, double v) const {
    std::ostringstream o;
    o << v;
    if (defaulted && defaulted->count(name))
      o << ", transformers' default: the config does not set " << name;
    return o.str();
  }
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
  for (const RopeScalingField& d : rope_scaling_fields())
    read_field(f, d, r, d.need == FieldNeed::Required);
  MOET_CHECK(r.factor >= 1.0, src, ": rope_scaling.factor must be >= 1, got ", r.factor);
  check_positive(src, "rope_scaling.original_max_position_embeddings",
                 r.original_max_position_embeddings);
  return r;
}

// RoPE's scaling and base: DeepSeek's and transformers 4's rope_scaling and rope_theta, or
// transformers 5's rope_parameters (rope_theta inside); when both forms are present they must
// agree. c.rope_theta holds the top-level rope_theta (or its default) when called.
void read_rope(const FieldReader& f, const json& j, const std::string& src, ModelConfig& c) {
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
  if (f.has("rope_scaling")) {
    RopeScaling r = parse_rope_scaling(j.at("rope_scaling"), src, "rope_scaling");
    MOET_CHECK(!f.has("rope_parameters") || same_rope_scaling(r, c.rope_scaling), src,
               ": rope_scaling and rope_parameters describe different RoPE scalings");
    c.rope_scaling = r;
  }
}

// Every field of the table: the model's sizes first (refused when missing), then the others in
// the table's order, each field of the dense or the MoE layers required only where the model
// has such layers (first_k_dense_replace, read first, says which).
ModelConfig read_fields(const FieldReader& f, const json& j, const std::string& src) {
  ModelConfig c;
  for (const ModelConfigField& d : model_config_fields())
    if (is_model_size(d)) read_field(f, d, c, true);
  read_field(f, model_config_field("first_k_dense_replace"), c, false);
  const bool moe = c.n_routed_experts > 0 && c.first_k_dense_replace < c.num_hidden_layers;
  const bool dense = c.n_routed_experts == 0 || c.first_k_dense_replace > 0;
  for (const ModelConfigField& d : model_config_fields()) {
    if (is_model_size(d)) continue;
    const bool has_layers = d.scope == FieldScope::Dense ? dense
                            : d.scope == FieldScope::Moe ? moe
                                                         : true;
    if (std::holds_alternative<RopeScaling ModelConfig::*>(d.member))
      read_rope(f, j, src, c);
    else
      read_field(f, d, c, d.need == FieldNeed::Required && has_layers);
  }
  return c;
}

void validate(const ModelConfig& c, const std::string& src, const std::set<std::string>& dflt) {
  const Shown shown{&dflt};
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
               ") must be divisible by n_group (", shown("n_group", double(c.n_group)), ")");
    MOET_CHECK(c.topk_group <= c.n_group, src, ": topk_group (",
               shown("topk_group", double(c.topk_group)), ") must not exceed n_group (",
               shown("n_group", double(c.n_group)), ")");
    int64_t kept = c.topk_group * (c.n_routed_experts / c.n_group);
    MOET_CHECK(c.num_experts_per_tok <= kept, src, ": num_experts_per_tok (", c.num_experts_per_tok,
               ") exceeds the ", kept, " experts in the topk_group (",
               shown("topk_group", double(c.topk_group)), ") kept groups");
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
  std::string mt = f.string_or("model_type", "deepseek_v3");
  MOET_CHECK(mt == "deepseek_v3" || mt == "deepseek_v2", src, ": model_type '", mt,
             "' is not a DeepSeek-V3 family model");
  warn_unknown_fields(j, src);
  // The sizes of the model have no default that fits a model of the user's own (transformers
  // would take DeepSeek-V3's): a missing one is refused. The rest take DeepseekV3Config's
  // defaults, as transformers' from_pretrained does.
  const ModelConfig c = read_fields(f, j, src);
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
  validate(c, src, f.defaulted());
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
