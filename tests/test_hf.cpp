// Hugging Face export and import (src/checkpoint/hf.h): export then load is bitwise in fp32, bf16
// rounds to nearest even (the router stays F32), the MTP layout and config.json are DeepSeek's,
// sharding writes a correct index, an expert-parallel store reads its own experts, and every bad
// directory gets one line naming the problem. tests/hf_interop.py checks against transformers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "checkpoint/hf.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/error.h"
#include "model/model.h"

namespace moet {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = MOET_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The experts [first, first + count) of each MoE layer, as one rank of an expert-parallel group
// holds them; only the parameters matter here (nothing runs forward).
class ExpertShard final : public TokenDispatcher {
 public:
  ExpertShard(int64_t first, int64_t count) : first_(first), count_(count) {}
  void plan(Workspace&, int64_t, int64_t) override {}
  int64_t max_expert_rows() const override { return 1; }
  int64_t first_local_expert() const override { return first_; }
  int64_t num_local_experts() const override { return count_; }
  int64_t segments_per_expert() const override { return 1; }
  void dispatch(const Tensor&, const Tensor&) override { MOET_FAIL("not used"); }
  Tensor expert_rows() const override { return {}; }
  Tensor expert_offsets() const override { return {}; }
  void combine(const Tensor&, const Tensor&, Tensor&, bool) override { MOET_FAIL("not used"); }
  void combine_backward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override {
    MOET_FAIL("not used");
  }
  void dispatch_backward(const Tensor&, Tensor&) override { MOET_FAIL("not used"); }

 private:
  int64_t first_, count_;
};

// One stored tensor, copied out of a file so the file can be rewritten.
struct Stored {
  StDType dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};
using Tensors = std::map<std::string, Stored>;

Tensors read_all(const std::string& path) {
  SafetensorsReader r(path);
  Tensors out;
  for (const std::string& n : r.names()) {
    const StTensorInfo& i = r.info(n);
    const auto* p = static_cast<const unsigned char*>(r.raw(n));
    out[n] = {i.dtype, i.shape, std::vector<unsigned char>(p, p + (i.end - i.begin))};
  }
  return out;
}

void write_all(const std::string& path, const Tensors& t) {
  SafetensorsWriter w;
  for (const auto& [n, s] : t) w.add(n, s.dtype, s.shape, s.bytes.data());
  w.write(path);
}

class Hf : public ::testing::Test {
 protected:
  void SetUp() override {
    config_path = kRoot + "/configs/tiny.json";
    cfg = load_model_config(config_path);
    dir = (fs::temp_directory_path() /
           ("moet_test_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name()))
              .string();
    fs::remove_all(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  std::unique_ptr<Model> model(uint64_t seed, DispatcherFactory d = nullptr) {
    auto m = std::make_unique<Model>(
        cfg, ModelSpec{.micro_batch = 1, .seq_len = 1, .dispatchers = std::move(d)});
    m->init_parameters(seed);
    return m;
  }
  HfExportResult export_to(Model& m, const std::string& out, HfExportOptions o = {}) {
    return export_hf(m.params(), cfg, read_text(config_path), out, o);
  }
  // A fp32 export of the model seeded 7, to edit.
  void fp32_export() {
    auto m = model(7);
    export_to(*m, dir, {HfDType::F32});
  }
  void expect_load_error(const std::string& needle) {
    auto m = model(8);
    try {
      load_hf_weights(dir, cfg, m->params());
      ADD_FAILURE() << "loaded a bad directory; expected an error mentioning: " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    }
  }

  std::string config_path, dir;
  ModelConfig cfg;
};

TEST_F(Hf, Fp32ExportThenLoadIsBitwise) {
  auto a = model(7), b = model(8);
  const HfExportResult e = export_to(*a, dir, {HfDType::F32});
  EXPECT_EQ(e.files, std::vector<std::string>{"model.safetensors"});
  ASSERT_NE(std::memcmp(a->params().all_values().ptr, b->params().all_values().ptr,
                        a->params().all_values().bytes()),
            0);
  const uint64_t version = b->params().version();
  const HfLoadResult r = load_hf_weights(dir, cfg, b->params());
  EXPECT_EQ(r.tensors, int64_t(b->params().names().size()));
  EXPECT_EQ(r.files, 1);
  EXPECT_TRUE(r.mtp_missing.empty());
  EXPECT_GT(b->params().version(), version) << "load must mark the parameters updated";
  EXPECT_EQ(std::memcmp(a->params().all_values().ptr, b->params().all_values().ptr,
                        a->params().all_values().bytes()),
            0);
}

TEST_F(Hf, Bf16ExportRoundsToNearestEvenAndKeepsTheRouterF32) {
  auto a = model(7), b = model(8);
  export_to(*a, dir, {HfDType::BF16});
  SafetensorsReader r(dir + "/model.safetensors");
  int64_t bf16 = 0, f32 = 0, inexact = 0;
  for (const auto& [name, slice] : a->params().names()) {
    const Tensor v = slice.value();
    const StTensorInfo& info = r.info(name);
    if (hf::kept_in_f32(name)) {
      ASSERT_EQ(info.dtype, StDType::F32) << name;
      EXPECT_EQ(std::memcmp(r.raw(name), v.ptr, v.bytes()), 0) << name;
      ++f32;
      continue;
    }
    ASSERT_EQ(info.dtype, StDType::BF16) << name;
    const auto* bits = static_cast<const uint16_t*>(r.raw(name));
    for (int64_t i = 0; i < v.numel(); ++i) {
      ASSERT_EQ(bits[i], bf16_bits(v.f32()[i])) << name << "[" << i << "]";
      inexact += bf16_to_float(bits[i]) != v.f32()[i];
    }
    ++bf16;
  }
  EXPECT_GT(bf16, 0);
  EXPECT_EQ(f32, 2 * cfg.num_moe_layers());  // gate.weight and e_score_correction_bias
  EXPECT_GT(inexact, 0) << "random fp32 weights must round";
  EXPECT_EQ(nlohmann::json::parse(read_text(dir + "/config.json"))["torch_dtype"], "bfloat16");

  load_hf_weights(dir, cfg, b->params());
  for (const auto& [name, slice] : a->params().names()) {
    const Tensor want = slice.value(), got = b->params().named(name).value();
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got.f32()[i], hf::kept_in_f32(name) ? want.f32()[i] : round_bf16(want.f32()[i]))
          << name;
  }
}

TEST_F(Hf, DeepSeekMtpLayoutAndTransformersConfig) {
  auto a = model(7);
  export_to(*a, dir, {HfDType::F32});
  SafetensorsReader r(dir + "/model.safetensors");
  std::set<std::string> want;
  for (const auto& [name, slice] : a->params().names()) want.insert(name);
  const std::string mtp = "model.layers." + std::to_string(cfg.num_hidden_layers) + ".";
  want.insert(mtp + "embed_tokens.weight");
  want.insert(mtp + "shared_head.head.weight");
  const std::vector<std::string> names = r.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want);
  for (const std::string& n : {mtp + "enorm.weight", mtp + "hnorm.weight", mtp + "eh_proj.weight",
                               mtp + "shared_head.norm.weight", mtp + "mlp.gate.weight"})
    EXPECT_TRUE(r.contains(n)) << n;
  EXPECT_EQ(r.read_f32(mtp + "embed_tokens.weight"), r.read_f32("model.embed_tokens.weight"));
  EXPECT_EQ(r.read_f32(mtp + "shared_head.head.weight"), r.read_f32("lm_head.weight"));
  EXPECT_EQ(r.metadata().at("format"), "pt");

  const nlohmann::json j = nlohmann::json::parse(read_text(dir + "/config.json"));
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"DeepseekV3ForCausalLM"}));
  EXPECT_EQ(j["model_type"], "deepseek_v3");
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(j["rope_interleave"], true);
  EXPECT_EQ(j["num_nextn_predict_layers"], 1);
  EXPECT_EQ(j["rope_scaling"]["type"], "yarn");
  EXPECT_EQ(j["rope_scaling"]["mscale_all_dim"], 1.0);
  EXPECT_EQ(j["bos_token_id"], 256) << "fields moet does not interpret are kept";
  const ModelConfig back = load_hf_config(dir);
  check_hf_config_matches(back, cfg, "exported");
  EXPECT_EQ(count_parameters(back), count_parameters(cfg));
}

TEST_F(Hf, ShardsPastTheLimitWithACorrectIndex) {
  auto a = model(7), b = model(8);
  const int64_t limit = 200'000;
  const HfExportResult e = export_to(*a, dir, {HfDType::F32, limit});
  ASSERT_GT(e.files.size(), 3u);
  for (size_t i = 0; i < e.files.size(); ++i) {
    char want[64];
    std::snprintf(want, sizeof want, "model-%05zu-of-%05zu.safetensors", i + 1, e.files.size());
    EXPECT_EQ(e.files[i], want);
  }
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(read_text(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], e.bytes);
  int64_t listed = 0, bytes = 0;
  for (const std::string& file : e.files) {
    SafetensorsReader r(dir + "/" + file);
    int64_t shard_bytes = 0;
    for (const std::string& n : r.names()) {
      EXPECT_EQ(index["weight_map"].value(n, ""), file) << n;
      shard_bytes += int64_t(r.info(n).end - r.info(n).begin);
    }
    EXPECT_TRUE(shard_bytes <= limit || r.size() == 1) << file << ": " << shard_bytes;
    listed += int64_t(r.size());
    bytes += shard_bytes;
  }
  EXPECT_EQ(listed, int64_t(index["weight_map"].size()));
  EXPECT_EQ(listed, e.tensors);
  EXPECT_EQ(bytes, e.bytes);

  const HfLoadResult r = load_hf_weights(dir, cfg, b->params());
  EXPECT_EQ(r.files, int64_t(e.files.size()));
  EXPECT_EQ(std::memcmp(a->params().all_values().ptr, b->params().all_values().ptr,
                        a->params().all_values().bytes()),
            0);

  // Exporting again into the same directory, unsharded, leaves no stale shard or index.
  export_to(*a, dir, {HfDType::F32});
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    EXPECT_TRUE(n == "config.json" || n == "model.safetensors") << n;
  }
}

TEST_F(Hf, AnExpertParallelStoreReadsItsOwnExperts) {
  auto full = model(7);
  export_to(*full, dir, {HfDType::F32});
  auto shard = model(8, [](int64_t) { return std::make_unique<ExpertShard>(4, 4); });
  EXPECT_FALSE(shard->params().names().count("model.layers.1.mlp.experts.3.up_proj.weight"));
  const HfLoadResult r = load_hf_weights(dir, cfg, shard->params());
  EXPECT_EQ(r.tensors, int64_t(shard->params().names().size()));
  int64_t experts = 0;
  for (const auto& [name, slice] : shard->params().names()) {
    const Tensor want = full->params().named(name).value(), got = slice.value();
    EXPECT_EQ(std::memcmp(want.ptr, got.ptr, want.bytes()), 0) << name;
    experts += hf::is_routed_expert_name(name, cfg);
  }
  EXPECT_EQ(experts, 3 * 4 * cfg.num_moe_layers());
  try {
    export_to(*shard, dir + "/again");
    ADD_FAILURE() << "exported an expert-parallel shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the whole model"), std::string::npos) << e.what();
  }
}

TEST_F(Hf, AMissingMtpModuleKeepsItsParameters) {
  fp32_export();
  Tensors t = read_all(dir + "/model.safetensors");
  const std::string mtp = hf::mtp_prefix(cfg, 1);
  std::erase_if(t, [&](const auto& kv) { return kv.first.rfind(mtp, 0) == 0; });
  write_all(dir + "/model.safetensors", t);
  auto b = model(8), fresh = model(8);
  const HfLoadResult r = load_hf_weights(dir, cfg, b->params());
  EXPECT_EQ(r.mtp_missing, std::vector<int64_t>{1});
  const std::string eh = mtp + "eh_proj.weight";
  const Tensor kept = b->params().named(eh).value(), seeded = fresh->params().named(eh).value();
  EXPECT_EQ(std::memcmp(kept.ptr, seeded.ptr, kept.bytes()), 0);
}

TEST_F(Hf, BadDirectoriesGetOneLine) {
  struct Case {
    std::string what, needle;
    std::function<void(Tensors&)> tensors;
    std::function<void(nlohmann::json&)> config;
  };
  const std::string mtp = hf::mtp_prefix(cfg, 1);
  const std::vector<Case> cases = {
      {"missing tensor", "no tensor 'model.layers.1.self_attn.o_proj.weight'",
       [](Tensors& t) { t.erase("model.layers.1.self_attn.o_proj.weight"); }, nullptr},
      {"part of an MTP module", "no tensor '" + mtp + "eh_proj.weight'",
       [&](Tensors& t) { t.erase(mtp + "eh_proj.weight"); }, nullptr},
      {"wrong shape", "'model.norm.weight' has shape [32] but the model's is [64]",
       [](Tensors& t) {
         Stored& s = t["model.norm.weight"];
         s.shape = {32};
         s.bytes.resize(32 * 4);
       },
       nullptr},
      {"integer weights", "'model.norm.weight' is I32; moet reads F32, BF16, F16 or F64",
       [](Tensors& t) { t["model.norm.weight"].dtype = StDType::I32; }, nullptr},
      {"unexpected tensor", "'model.layers.0.mlp.experts.0.up_proj.weight' is not part of",
       [](Tensors& t) {
         t["model.layers.0.mlp.experts.0.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"];
       },
       nullptr},
      {"MTP copy differs",
       "'" + mtp + "embed_tokens.weight' differs from 'model.embed_tokens.weight'",
       [&](Tensors& t) { t[mtp + "embed_tokens.weight"].bytes[0] ^= 1; }, nullptr},
      {"config field", "config.json: rope_theta is 20000 but the model's is 10000", nullptr,
       [](nlohmann::json& j) { j["rope_theta"] = 20000; }},
      {"dense/MoE layers", "layer 1 is dense but the model's is MoE", nullptr,
       [](nlohmann::json& j) { j["first_k_dense_replace"] = 2; }},
      {"non-interleaved RoPE", "rope_interleave=false is not supported", nullptr,
       [](nlohmann::json& j) { j["rope_interleave"] = false; }},
      {"YaRN off", "rope_scaling (yarn) is false but the model's is true", nullptr,
       [](nlohmann::json& j) { j["rope_scaling"] = nullptr; }},
      {"base model layout", "has no DeepseekV3ForCausalLM", nullptr,
       [](nlohmann::json& j) { j["architectures"] = {"DeepseekV3Model"}; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir);
    fp32_export();
    if (c.tensors) {
      Tensors t = read_all(dir + "/model.safetensors");
      c.tensors(t);
      write_all(dir + "/model.safetensors", t);
    }
    if (c.config) {
      nlohmann::json j = nlohmann::json::parse(read_text(dir + "/config.json"));
      c.config(j);
      write_text(dir + "/config.json", j.dump());
    }
    expect_load_error(c.needle);
  }
}

TEST_F(Hf, BadShardIndexesGetOneLine) {
  auto a = model(7);
  const HfExportResult e = export_to(*a, dir, {HfDType::F32, 200'000});
  const std::string index_path = dir + "/model.safetensors.index.json";
  const nlohmann::json index = nlohmann::json::parse(read_text(index_path));

  nlohmann::json j = index;
  j["weight_map"]["model.norm.weight"] =
      e.files[0] == j["weight_map"]["model.norm.weight"] ? e.files[1] : e.files[0];
  write_text(index_path, j.dump());
  expect_load_error("puts tensor 'model.norm.weight' in ");

  j = index;
  j["weight_map"]["model.norm.weight"] = "model-00099-of-00099.safetensors";
  write_text(index_path, j.dump());
  expect_load_error("cannot open safetensors file '" + dir + "/model-00099-of-00099.safetensors'");

  j = index;
  j["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_text(index_path, j.dump());
  expect_load_error("not a file in the directory");

  fs::remove(index_path);
  expect_load_error("has neither model.safetensors nor model.safetensors.index.json");
}

TEST_F(Hf, ExportRejectsABadShardLimitAndDtype) {
  auto a = model(7);
  EXPECT_THROW(export_to(*a, dir, {HfDType::F32, 0}), Error);
  EXPECT_THROW(parse_hf_dtype("fp16"), Error);
  EXPECT_EQ(parse_hf_dtype("bf16"), HfDType::BF16);
  EXPECT_EQ(parse_hf_dtype("fp32"), HfDType::F32);
}

}  // namespace
}  // namespace moet
