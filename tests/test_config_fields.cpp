// ModelConfig's table of fields (model/config_fields.h): it covers every member, every field
// round-trips through both writers (`moet config --json` and export-hf's config.json) and the
// reader, the writers agree (on mscale too), and docs/model.md's tables are the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/hf.h"
#include "core/error.h"
#include "core/file_io.h"
#include "model/config.h"
#include "model/config_fields.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

nlohmann::json tiny_json() {
  return nlohmann::json::parse(read_text_file(kRoot + "/configs/tiny.json"));
}

// A valid model in which no field holds its default, so a field a writer or the reader missed
// comes back different.
ModelConfig every_field_set() {
  ModelConfig c;
  c.vocab_size = 300, c.hidden_size = 48, c.intermediate_size = 96, c.moe_intermediate_size = 24;
  c.num_hidden_layers = 5, c.first_k_dense_replace = 2, c.num_attention_heads = 3;
  c.q_lora_rank = 20, c.kv_lora_rank = 12, c.qk_nope_head_dim = 10, c.qk_rope_head_dim = 6;
  c.v_head_dim = 14, c.n_routed_experts = 12, c.n_shared_experts = 2, c.num_experts_per_tok = 3;
  c.n_group = 3, c.topk_group = 2, c.routed_scaling_factor = 1.75, c.norm_topk_prob = false;
  c.rms_norm_eps = 1e-5, c.rope_theta = 50000.5;
  c.rope_scaling = {true, 2.5, 32, 24.5, 1.5, 0.75, 0.5};
  c.max_position_embeddings = 80, c.num_nextn_predict_layers = 2, c.tie_word_embeddings = true;
  c.initializer_range = 0.015;
  return c;
}

// Offsets and sizes of the members a table names; together with the record's padding they must
// fill the whole record, or a member is missing from the table.
struct Span {
  size_t offset, size, align;
};

template <class Record>
void expect_covers(std::vector<Span> spans, const char* record) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.offset < b.offset; });
  size_t end = 0;
  for (const Span& s : spans) {
    EXPECT_LT(s.offset - end, s.align)
        << record << ": a member before offset " << s.offset << " is not in the table";
    end = s.offset + s.size;
  }
  EXPECT_LT(sizeof(Record) - end, alignof(Record))
      << record << ": its last member is not in the table";
}

template <class Record>
std::vector<Span> spans_of(std::span<const FieldDesc<Record>> fields) {
  static const Record r{};
  std::vector<Span> spans;
  for (const FieldDesc<Record>& d : fields)
    std::visit(
        [&](auto m) {
          using T = std::remove_reference_t<decltype(r.*m)>;
          const auto at =
              reinterpret_cast<const char*>(&(r.*m)) - reinterpret_cast<const char*>(&r);
          spans.push_back({size_t(at), sizeof(T), alignof(T)});
        },
        d.member);
  return spans;
}

TEST(ConfigFields, TheTablesNameEveryMember) {
  expect_covers<ModelConfig>(spans_of(model_config_fields()), "ModelConfig");
  std::vector<Span> rope = spans_of(rope_scaling_fields());
  rope.push_back({offsetof(RopeScaling, yarn), sizeof(bool), alignof(bool)});  // "type": "yarn"
  expect_covers<RopeScaling>(rope, "RopeScaling");
}

TEST(ConfigFields, NoFieldOfTheTestModelHoldsItsDefault) {
  const ModelConfig c = every_field_set(), d;
  for (const ModelConfigField& f : model_config_fields())
    EXPECT_FALSE(same_field(f, c, d)) << f.key << " is at its default: it proves nothing";
  for (const RopeScalingField& f : rope_scaling_fields())
    EXPECT_FALSE(same_field(f, c.rope_scaling, RopeScaling{})) << f.key;
}

void expect_same(const ModelConfig& a, const ModelConfig& b, const std::string& how) {
  for (const ModelConfigField& f : model_config_fields())
    EXPECT_TRUE(same_field(f, a, b))
        << how << ": " << f.key << " " << field_text(f, a) << " vs " << field_text(f, b);
}

TEST(ConfigFields, EveryFieldRoundTripsThroughBothWriters) {
  const ModelConfig c = every_field_set();
  const std::string printed = model_config_json(c).dump(2);
  expect_same(parse_model_config(printed, "printed.json"), c, "moet config --json");
  const std::string exported = hf_config_json(c, "{}", "source", HfDType::F32);
  expect_same(parse_model_config(exported, "exported.json"), c, "export-hf's config.json");
  // and again, as the shipped test model
  const ModelConfig tiny = load_model_config(kRoot + "/configs/tiny.json");
  expect_same(parse_model_config(model_config_json(tiny).dump(), "tiny.json"), tiny, "tiny");
}

// `moet config` and export-hf write every field alike (export also writes what moet fixes, and
// transformers' first_k_dense_replace for a dense model); an unset mscale or mscale_all_dim is
// left out by both, as transformers' DeepseekV3Config leaves it out (it reads 0 as unset too).
TEST(ConfigFields, TheWritersAgreeOnMscale) {
  for (const char* mscale : {"set", "left out", "zero"}) {
    nlohmann::json src = tiny_json();
    for (const char* k : {"mscale", "mscale_all_dim"}) {
      if (mscale[0] == 'l') src["rope_scaling"].erase(k);
      if (mscale[0] == 'z') src["rope_scaling"][k] = 0.0;
    }
    const ModelConfig c = parse_model_config(src.dump(), "src.json");
    const nlohmann::ordered_json printed = model_config_json(c);
    const auto exported =
        nlohmann::ordered_json::parse(hf_config_json(c, src.dump(), "src.json", HfDType::BF16));
    for (const auto& [key, value] : printed.items())
      EXPECT_EQ(exported.at(key), value) << key << " with mscale " << mscale;
    const bool set = mscale[0] == 's';
    for (const char* k : {"mscale", "mscale_all_dim"}) {
      EXPECT_EQ(printed["rope_scaling"].contains(k), set) << k << " " << mscale;
      EXPECT_EQ(exported["rope_scaling"].contains(k), set) << k << " " << mscale;
    }
  }
}

// An imported checkpoint's config.json must agree with the model on every `matched` field, and
// the refusal names it; the others (context length, MTP depth, initialisation) may differ.
TEST(ConfigFields, ImportComparesTheMatchedFields) {
  const ModelConfig m = every_field_set();
  for (const ModelConfigField& d : model_config_fields()) {
    if (d.key == std::string("first_k_dense_replace")) continue;  // compared layer by layer
    ModelConfig hf = m;
    std::visit(Overloaded{[&](int64_t ModelConfig::*p) { hf.*p += 1; },
                          [&](double ModelConfig::*p) { hf.*p = 2 * hf.*p + 1; },
                          [&](bool ModelConfig::*p) { hf.*p = !(hf.*p); },
                          [&](RopeScaling ModelConfig::*p) { (hf.*p).factor += 1; }},
               d.member);
    try {
      check_hf_config_matches(hf, m, "hf");
      EXPECT_FALSE(d.matched) << d.key << " differs and the import accepted it";
    } catch (const Error& e) {
      EXPECT_TRUE(d.matched) << d.key << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(d.key), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigFields, EveryKeyIsAKnownField) {
  testing::internal::CaptureStderr();
  parse_model_config(model_config_json(every_field_set()).dump(), "known-keys.json");
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(said.find("unknown field"), std::string::npos) << said;
}

// What a config that leaves a field out gets: tiny.json has dense and MoE layers, so every
// Required field is refused; the others take their fallback.
TEST(ConfigFields, LeftOutFieldsAreRefusedOrDefaulted) {
  for (const ModelConfigField& f : model_config_fields()) {
    nlohmann::json j = tiny_json();
    j.erase(f.key);
    if (f.need == FieldNeed::Required) {
      try {
        parse_model_config(j.dump(), "cfg.json");
        ADD_FAILURE() << f.key << ": a config without it was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("missing required field '") + f.key),
                  std::string::npos)
            << e.what();
      }
      continue;
    }
    const ModelConfig c = parse_model_config(j.dump(), "cfg.json");
    std::visit(Overloaded{[&](RopeScaling ModelConfig::*m) { EXPECT_FALSE((c.*m).yarn); },
                          [&](auto m) { EXPECT_EQ(double(c.*m), f.fallback) << f.key; }},
               f.member);
  }
}

TEST(ConfigFields, DocsListTheFieldsAsTheTableDoes) {
  const std::string docs = read_text_file(kRoot + "/docs/model.md");
  const std::string table = model_config_fields_markdown();
  EXPECT_NE(docs.find(table), std::string::npos)
      << "docs/model.md's tables of the config fields differ from model/config_fields.cpp's; "
         "they should read:\n"
      << table;
}

}  // namespace
}  // namespace moet
