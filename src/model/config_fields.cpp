#include "model/config_fields.h"

#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace moet {

namespace {

using C = ModelConfig;
using R = RopeScaling;
constexpr FieldNeed kRequired = FieldNeed::Required, kDefaulted = FieldNeed::Defaulted,
                    kOptional = FieldNeed::Optional;
constexpr FieldScope kModel = FieldScope::Model, kDense = FieldScope::Dense, kMoe = FieldScope::Moe;
// Why a size is refused rather than defaulted.
constexpr const char* kSizes =
    "it sizes the model; transformers would take DeepSeek-V3 671B's value";

// key, member, need, fallback (DeepseekV3Config's default), scope, matched, meaning, why
const ModelConfigField kModelConfigFields[] = {
    {"vocab_size", &C::vocab_size, kRequired, 0, kModel, true, "token ids (V)", kSizes},
    {"hidden_size", &C::hidden_size, kRequired, 0, kModel, true, "hidden size (D)", kSizes},
    {"intermediate_size", &C::intermediate_size, kRequired, 18432, kDense, true,
     "FFN width of the dense layers (F)", "the FFN width of the dense layers"},
    {"moe_intermediate_size", &C::moe_intermediate_size, kRequired, 2048, kMoe, true,
     "FFN width of each expert (F)", "each expert's FFN width"},
    {"num_hidden_layers", &C::num_hidden_layers, kRequired, 0, kModel, true,
     "decoder layers of the main model", kSizes},
    {"first_k_dense_replace", &C::first_k_dense_replace, kDefaulted, 3, kModel, false,
     "the first this many layers are dense, the others MoE", nullptr},
    {"num_attention_heads", &C::num_attention_heads, kRequired, 0, kModel, true,
     "attention heads (H)", kSizes},
    {"q_lora_rank", &C::q_lora_rank, kRequired, 0, kModel, true, "query LoRA rank (Q)", kSizes},
    {"kv_lora_rank", &C::kv_lora_rank, kRequired, 0, kModel, true, "compressed key-value rank (C)",
     kSizes},
    {"qk_nope_head_dim", &C::qk_nope_head_dim, kRequired, 0, kModel, true,
     "query and key dimensions per head without RoPE (P)", kSizes},
    {"qk_rope_head_dim", &C::qk_rope_head_dim, kRequired, 0, kModel, true,
     "query and key dimensions per head with RoPE (R, even)", kSizes},
    {"v_head_dim", &C::v_head_dim, kRequired, 0, kModel, true, "value dimensions per head (U)",
     kSizes},
    {"n_routed_experts", &C::n_routed_experts, kRequired, 0, kModel, true,
     "routed experts of each MoE layer (E), 0 for a dense model",
     "the routed experts of each MoE layer, 0 for a dense model; transformers would take "
     "DeepSeek-V3's 256"},
    {"n_shared_experts", &C::n_shared_experts, kDefaulted, 1, kMoe, true,
     "shared experts of each MoE layer (one expert of this many times the width)", nullptr},
    {"num_experts_per_tok", &C::num_experts_per_tok, kRequired, 8, kMoe, true,
     "routed experts each token goes to (K)", "the routed experts each token goes to"},
    {"n_group", &C::n_group, kDefaulted, 8, kMoe, true, "expert groups (G)", nullptr},
    {"topk_group", &C::topk_group, kDefaulted, 4, kMoe, true,
     "the groups a token's experts are chosen from", nullptr},
    {"routed_scaling_factor", &C::routed_scaling_factor, kDefaulted, 2.5, kMoe, true,
     "scale of the routed experts' gates", nullptr},
    {"norm_topk_prob", &C::norm_topk_prob, kDefaulted, 1, kMoe, true,
     "gates normalised over the chosen experts", nullptr},
    {"rms_norm_eps", &C::rms_norm_eps, kDefaulted, 1e-6, kModel, true, "RMSNorm's epsilon",
     nullptr},
    {"rope_theta", &C::rope_theta, kDefaulted, 10000, kModel, true, "RoPE's base", nullptr},
    {"rope_scaling", &C::rope_scaling, kDefaulted, 0, kModel, true,
     "YaRN (the table below), or null for none", nullptr},
    {"max_position_embeddings", &C::max_position_embeddings, kDefaulted, 4096, kModel, false,
     "context length (with YaRN, the extended one)", nullptr},
    {"num_nextn_predict_layers", &C::num_nextn_predict_layers, kDefaulted, 1, kModel, false,
     "multi-token-prediction modules", nullptr},
    {"tie_word_embeddings", &C::tie_word_embeddings, kDefaulted, 0, kModel, true,
     "the LM head is the embedding", nullptr},
    {"initializer_range", &C::initializer_range, kDefaulted, 0.02, kModel, false,
     "standard deviation of the initial weights", nullptr},
};

const RopeScalingField kRopeScalingFields[] = {
    {"factor", &R::factor, kRequired, 0, kModel, true, "context extension (>= 1)", nullptr},
    {"original_max_position_embeddings", &R::original_max_position_embeddings, kRequired, 0, kModel,
     true, "context length before the extension", nullptr},
    {"beta_fast", &R::beta_fast, kDefaulted, 32, kModel, true, "YaRN's correction range, fast end",
     nullptr},
    {"beta_slow", &R::beta_slow, kDefaulted, 1, kModel, true, "YaRN's correction range, slow end",
     nullptr},
    {"mscale", &R::mscale, kOptional, 0, kModel, true,
     "numerator of the cos/sin factor (with mscale_all_dim)", nullptr},
    {"mscale_all_dim", &R::mscale_all_dim, kOptional, 0, kModel, true,
     "the softmax scale's mscale, and the cos/sin factor's denominator", nullptr},
};

template <class Record>
void write_fields(const Record& r, std::span<const FieldDesc<Record>> fields,
                  nlohmann::ordered_json& j) {
  for (const FieldDesc<Record>& d : fields)
    std::visit(Overloaded{[&](int64_t Record::*m) { j[d.key] = r.*m; },
                          [&](double Record::*m) {
                            if (d.need != FieldNeed::Optional || r.*m != 0.0) j[d.key] = r.*m;
                          },
                          [&](bool Record::*m) { j[d.key] = r.*m; },
                          [&](RopeScaling Record::*m) { j[d.key] = rope_scaling_json(r.*m); }},
               d.member);
}

template <class Record>
const char* type_name(const FieldDesc<Record>& d) {
  return std::visit(Overloaded{[](int64_t Record::*) { return "integer"; },
                               [](double Record::*) { return "number"; },
                               [](bool Record::*) { return "boolean"; },
                               [](RopeScaling Record::*) { return "object or null"; }},
                    d.member);
}

// A default as a config.json would write it: 3, 2.5, 1e-06, true.
template <class Record>
std::string value_text(const FieldDesc<Record>& d, double v) {
  char buf[32];
  std::visit(
      Overloaded{
          [&](int64_t Record::*) { std::snprintf(buf, sizeof buf, "%lld", (long long)v); },
          [&](double Record::*) { std::snprintf(buf, sizeof buf, "%g", v); },
          [&](bool Record::*) { std::snprintf(buf, sizeof buf, "%s", v != 0 ? "true" : "false"); },
          [&](RopeScaling Record::*) { std::snprintf(buf, sizeof buf, "null"); }},
      d.member);
  return buf;
}

// What a config that leaves the field out gets.
template <class Record>
std::string when_left_out(const FieldDesc<Record>& d) {
  switch (d.need) {
    case FieldNeed::Required:
      if (d.scope == FieldScope::Model) return "refused";
      return std::string("refused where the model has ") +
             (d.scope == FieldScope::Dense ? "dense" : "MoE") + " layers, else " +
             value_text(d, d.fallback);
    case FieldNeed::Defaulted:
      return value_text(d, d.fallback);
    case FieldNeed::Optional:
      return "not set";
  }
  return "";
}

template <class Record>
void markdown_rows(std::ostringstream& o, std::span<const FieldDesc<Record>> fields) {
  for (const FieldDesc<Record>& d : fields)
    o << "| `" << d.key << "` | " << type_name(d) << " | " << when_left_out(d) << " | " << d.meaning
      << " |\n";
}

}  // namespace

std::span<const ModelConfigField> model_config_fields() { return kModelConfigFields; }
std::span<const RopeScalingField> rope_scaling_fields() { return kRopeScalingFields; }

const ModelConfigField& model_config_field(std::string_view key) {
  for (const ModelConfigField& d : kModelConfigFields)
    if (key == d.key) return d;
  fail_internal(__FILE__, __LINE__, str("no ModelConfig field '", key, "'"));
}

nlohmann::ordered_json model_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  write_fields(c, model_config_fields(), j);
  return j;
}

nlohmann::ordered_json rope_scaling_json(const RopeScaling& r) {
  if (!r.yarn) return nullptr;
  nlohmann::ordered_json j = {{"type", "yarn"}};
  write_fields(r, rope_scaling_fields(), j);
  return j;
}

template <class Record>
bool same_field(const FieldDesc<Record>& d, const Record& a, const Record& b) {
  return std::visit(
      Overloaded{[&](RopeScaling Record::*m) { return same_rope_scaling(a.*m, b.*m); },
                 [&](auto m) { return a.*m == b.*m; }},
      d.member);
}

bool same_rope_scaling(const RopeScaling& a, const RopeScaling& b) {
  if (a.yarn != b.yarn) return false;
  for (const RopeScalingField& d : rope_scaling_fields())
    if (!same_field(d, a, b)) return false;
  return true;
}

template <class Record>
std::string field_text(const FieldDesc<Record>& d, const Record& r) {
  std::ostringstream o;
  std::visit(Overloaded{[&](bool Record::*m) { o << (r.*m ? "true" : "false"); },
                        [&](RopeScaling Record::*m) { o << rope_scaling_json(r.*m).dump(); },
                        [&](auto m) { o << r.*m; }},
             d.member);
  return o.str();
}

template bool same_field(const ModelConfigField&, const ModelConfig&, const ModelConfig&);
template bool same_field(const RopeScalingField&, const RopeScaling&, const RopeScaling&);
template std::string field_text(const ModelConfigField&, const ModelConfig&);
template std::string field_text(const RopeScalingField&, const RopeScaling&);

std::string model_config_fields_markdown() {
  std::ostringstream o;
  o << "| field | type | when the config leaves it out | meaning |\n|---|---|---|---|\n";
  markdown_rows(o, model_config_fields());
  o << "\n| `rope_scaling` key | type | when it leaves it out | meaning |\n|---|---|---|---|\n";
  markdown_rows(o, rope_scaling_fields());
  return o.str();
}

}  // namespace moet
