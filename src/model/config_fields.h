// ModelConfig's fields, described once (as ggml's type-traits table): each one's Hugging Face
// key, its member, and what a config.json without it means. parse_model_config reads by this
// table, `moet config` and export-hf's config.json write by it, check_hf_config_matches compares
// by it, and docs/model.md's tables of the fields are it (tests/test_config_fields.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "core/overloaded.h"
#include "model/config.h"

namespace moet {

// What a config.json that leaves a field out means.
enum class FieldNeed : uint8_t {
  Required,   // no default fits a model of one's own: the config is refused, naming the field
  Defaulted,  // DeepseekV3Config's default (`fallback`), as transformers' from_pretrained takes it
  Optional,   // not set: held as 0 and not written (transformers tests it for truth)
};

// The layers a field describes. A Required field of the dense or the MoE layers is required only
// where the model has such layers (else it takes `fallback`), and an imported checkpoint's
// config must agree on it only then.
enum class FieldScope : uint8_t { Model, Dense, Moe };

template <class Record>
struct FieldDesc {
  using Member =
      std::variant<int64_t Record::*, double Record::*, bool Record::*, RopeScaling Record::*>;
  const char* key;  // the config.json key
  Member member;
  FieldNeed need;
  double fallback;      // Defaulted (and Required outside its scope): DeepseekV3Config's default
  FieldScope scope;     // the layers it describes
  bool matched;         // an imported checkpoint's config.json must agree with the model on it
  const char* meaning;  // docs/model.md's description
  const char* why;      // Required: what the refusal says it is for (nullptr: no reason given)
};

using ModelConfigField = FieldDesc<ModelConfig>;
using RopeScalingField = FieldDesc<RopeScaling>;

// Every ModelConfig member, in the order `moet config` and config.json list them.
std::span<const ModelConfigField> model_config_fields();
// The YaRN keys of rope_scaling (besides "type": "yarn"), in the order they are written.
std::span<const RopeScalingField> rope_scaling_fields();
// The field of `key`; an unknown key is an internal error.
const ModelConfigField& model_config_field(std::string_view key);

// The fields as config.json holds them (Hugging Face names, this table's order).
nlohmann::ordered_json model_config_json(const ModelConfig& c);
// null without YaRN; else DeepSeek's spelling ("type": "yarn", which transformers 4 and 5 both
// read) and every key of rope_scaling_fields() except an Optional one that is not set.
nlohmann::ordered_json rope_scaling_json(const RopeScaling& r);

// docs/model.md's tables of the fields: ModelConfig's, then rope_scaling's (markdown).
std::string model_config_fields_markdown();

// The fields that size the whole model (Required, FieldScope::Model): read and compared before
// the others, which may depend on them.
inline bool is_model_size(const ModelConfigField& d) {
  return d.need == FieldNeed::Required && d.scope == FieldScope::Model;
}
// Whether two RoPE scalings are the same: both without YaRN, or with every key equal.
bool same_rope_scaling(const RopeScaling& a, const RopeScaling& b);
// Whether a and b hold the same value of field d (a RopeScaling: same_rope_scaling).
template <class Record>
bool same_field(const FieldDesc<Record>& d, const Record& a, const Record& b);
// d's value in r as messages show it: 3, 2.5, 1e-06, true (a RopeScaling: its JSON).
template <class Record>
std::string field_text(const FieldDesc<Record>& d, const Record& r);

}  // namespace moet
