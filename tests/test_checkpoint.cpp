// Checkpoint format and durability: CRC-32C, a save/load round trip bit for bit, the saver's
// snapshot semantics (async equals sync, later updates don't leak in), `latest` and --keep-last,
// an interrupted save leaving the previous checkpoint loadable, and one clear line for a
// truncated file, a flipped bit, another model's checkpoint, or a damaged index.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/async_saver.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_diff.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "error_of.h"
#include "metrics/progress.h"
#include "model/model.h"
#include "optim/adamw.h"

namespace moet {
namespace {

using test::error_of;

namespace fs = std::filesystem;
const std::string kRoot = MOET_SOURCE_DIR;
const std::string kTiny = kRoot + "/configs/tiny.json";

fs::path scratch(const std::string& name) {
  fs::path p = fs::path(MOET_BINARY_DIR) / "test_checkpoint" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A tiny model with its AdamW state filled with seeded values.
struct State {
  ModelConfig cfg;
  Model model;
  AdamW adamw;
  explicit State(uint64_t seed, const std::string& config = kTiny)
      : cfg(load_model_config(config)),
        model(cfg, {.micro_batch = 1, .seq_len = 8}),
        adamw(model.params(), AdamWConfig{}) {
    model.init_parameters(seed);
    std::mt19937 rng{uint32_t(seed)};
    std::normal_distribution<float> d;
    for (Tensor t : {adamw.moment1(), adamw.moment2()})
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
    // buffers (the expert biases) have no moments: AdamW never touches theirs
    for (const Weight& w : model.params().weights())
      if (!w.trainable)
        for (Tensor t : {adamw.moment1(), adamw.moment2()})
          std::fill(t.f32() + w.offset, t.f32() + w.offset + w.value.numel(), 0.0f);
    adamw.set_steps_taken(int64_t(seed));
  }
  StateHolder holder() {
    StateHolder h;
    h.params = &model.params();
    h.adamw = &adamw;
    return h;
  }
};

CheckpointIndex meta_of(int64_t step) {
  CheckpointIndex m;
  m.step = step;
  m.seed = 7;
  m.model_config = read_json_file(kTiny);
  return m;
}

std::string save(State& s, const fs::path& run, int64_t step, int64_t keep_last = 0) {
  const std::string tmp = (run / (step_dir_name(step) + ".tmp")).string();
  fs::create_directories(tmp);
  write_rank_shard(tmp, 0, training_state_pieces(s.holder(), true));
  seal_checkpoint(tmp, 1, meta_of(step), kTiny);
  return publish_checkpoint(run.string(), tmp, step, keep_last);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), a.bytes()) == 0;
}

TEST(Crc32c, KnownValueAndBothImplementationsAgree) {
  const char* check = "123456789";
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c_portable(check, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_string(0xE3069283u), "crc32c:e3069283");
  EXPECT_EQ(parse_crc32c_string("crc32c:e3069283", "t"), 0xE3069283u);
  std::vector<unsigned char> buf(1000);
  std::mt19937 rng(1);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t off : {0, 1, 3, 7})
    for (size_t n : {0, 1, 7, 8, 9, 63, 500, 993}) {
      ASSERT_EQ(crc32c(buf.data() + off, n), crc32c_portable(buf.data() + off, n)) << off << n;
      // continuing a checksum equals computing it in one go
      ASSERT_EQ(crc32c(buf.data() + off + n / 2, n - n / 2, crc32c(buf.data() + off, n / 2)),
                crc32c(buf.data() + off, n));
    }
}

TEST(Checkpoint, SaveAndLoadAreBitwiseWithLatestPointer) {
  const fs::path run = scratch("roundtrip");
  State a(1);
  const std::string dir = save(a, run, 3);
  EXPECT_EQ(dir, (run / "step-0000003").string());
  EXPECT_EQ(resolve_checkpoint_dir(run.string()), dir);
  EXPECT_EQ(resolve_checkpoint_dir(dir), dir);
  State b(2);
  ASSERT_FALSE(same_bits(a.model.params().all_values(), b.model.params().all_values()));
  CheckpointReader r(dir);
  EXPECT_EQ(r.index().step, 3);
  r.check_model(read_json_file(kTiny));
  const auto pieces = training_state_pieces(b.holder(), false);
  r.check_tensors(pieces, "param/");
  r.read(pieces);
  EXPECT_TRUE(same_bits(a.model.params().all_values(), b.model.params().all_values()));
  EXPECT_TRUE(same_bits(a.adamw.moment1(), b.adamw.moment1()));
  EXPECT_TRUE(same_bits(a.adamw.moment2(), b.adamw.moment2()));
  // The expert biases (buffers, not trained by AdamW) are part of the state.
  EXPECT_TRUE(r.index().tensors.count("param/model.layers.1.mlp.gate.e_score_correction_bias"));
  EXPECT_EQ(r.verify_all(), r.index().total_bytes());
}

// The state written as two processes would write it under another layout: every tensor split
// in two pieces, the first half in rank 0's file and the second in rank 1's.
std::string save_split(State& s, const fs::path& run, int64_t step) {
  const std::string tmp = (run / (step_dir_name(step) + ".tmp")).string();
  fs::create_directories(tmp);
  std::vector<StatePiece> first, second;
  for (const StatePiece& p : training_state_pieces(s.holder(), true)) {
    const int64_t h = p.n / 2;
    if (h == 0) {
      first.push_back(p);
      continue;
    }
    first.push_back({p.tensor, p.shape, p.begin, h, p.data});
    second.push_back({p.tensor, p.shape, p.begin + h, p.n - h, p.data + h});
  }
  write_rank_shard(tmp, 0, first);
  write_rank_shard(tmp, 1, second);
  CheckpointIndex meta = meta_of(step);
  meta.run["ranks"] = 2;
  seal_checkpoint(tmp, 2, meta, kTiny);
  return publish_checkpoint(run.string(), tmp, step, 0);
}

CheckpointDiff diff_dirs(const std::string& a, const std::string& b) {
  return diff_checkpoints(CheckpointReader(a), CheckpointReader(b));
}

std::string lines(const CheckpointDiff& d) {
  std::string s;
  for (const std::string& l : d.differences) s += l + "\n";
  return s;
}

// `moet checkpoint diff` is the oracle of every bitwise test, so it must be seen to fail: each
// negative control is one difference, found and named.
TEST(CheckpointDiff, NegativeControlsAreFoundAndNamed) {
  const fs::path root = scratch("diff");
  State base(1);
  const std::string a = save(base, root / "a", 3);
  const size_t tensors = CheckpointReader(a).index().tensors.size();

  // positive controls: the same state, in the same layout and split over two files
  CheckpointDiff d = diff_dirs(a, save(*std::make_unique<State>(1), root / "same", 3));
  EXPECT_TRUE(d.identical()) << lines(d);
  EXPECT_EQ(d.tensors_compared, int64_t(tensors));
  d = diff_dirs(a, save_split(*std::make_unique<State>(1), root / "split", 3));
  EXPECT_TRUE(d.identical()) << lines(d);
  ASSERT_EQ(d.layout_notes.size(), 1u);
  EXPECT_EQ(d.layout_notes[0], "ranks - vs 2");

  const Weight& w = base.model.params().weights()[3];
  ASSERT_TRUE(w.trainable);
  const int64_t k = w.value.numel() / 2;
  auto one_difference = [&](const CheckpointDiff& r, const std::string& starts) {
    ASSERT_EQ(r.differences.size(), 1u) << lines(r);
    EXPECT_EQ(r.differences[0].rfind(starts, 0), 0u) << r.differences[0];
    EXPECT_EQ(r.tensors_compared, int64_t(tensors));
  };

  {  // one element of one weight, by the smallest step a float can take
    State s(1);
    float& x = s.model.params().weights()[3].value.f32()[k];
    x = std::nextafter(x, 1e9f);
    one_difference(diff_dirs(a, save(s, root / "element", 3)),
                   "param/" + w.name + ": 1 of " + std::to_string(w.value.numel()) +
                       " values differ (first at " + std::to_string(k) + ":");
    // the same change, written split over two files (another layout), is found and named too
    State t(1);
    t.model.params().weights()[3].value.f32()[k] = x;
    one_difference(diff_dirs(a, save_split(t, root / "element-split", 3)),
                   "param/" + w.name + ": 1 of ");
  }
  {  // an optimizer moment only: the weights are equal
    State s(1);
    s.adamw.moment2().f32()[w.offset + k] *= 2;
    one_difference(diff_dirs(a, save(s, root / "moment", 3)), "adam_v/" + w.name + ": 1 of ");
  }
  {  // the step counter only: every tensor is equal
    State s(1);
    one_difference(diff_dirs(a, save(s, root / "step", 4)), "step: 3 vs 4");
  }
}

TEST(Checkpoint, WeightsOnlyCheckpointLoadsIntoAnyModel) {
  const fs::path dir = scratch("weights") / "ckpt";
  fs::remove_all(dir);
  State a(1), b(2);
  save_weights_checkpoint(dir.string(), a.model.params(), kTiny);
  EXPECT_NE(error_of([&] {
              save_weights_checkpoint(dir.string(), a.model.params(), kTiny);
            }).find("already exists"),
            std::string::npos);
  load_checkpoint_weights(dir.string(), b.model.params());
  EXPECT_TRUE(same_bits(a.model.params().all_values(), b.model.params().all_values()));
}

TEST(Checkpoint, KeepLastRemovesOnlyOlderCheckpoints) {
  const fs::path run = scratch("keep");
  State a(1);
  for (int64_t step : {2, 4, 6, 8}) save(a, run, step, 2);
  const auto all = list_checkpoints(run.string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 6);
  EXPECT_EQ(all[1].first, 8);
  EXPECT_EQ(*latest_checkpoint(run.string()), (run / "step-0000008").string());
  EXPECT_NE(error_of([&] { save(a, run, 8); }).find("already exists"), std::string::npos);
}

TEST(Checkpoint, InterruptedSaveLeavesThePreviousCheckpointLoadable) {
  const fs::path run = scratch("interrupted");
  State a(1);
  save(a, run, 1);
  // A process killed mid-save: a temporary directory with a partial shard, no index.
  const fs::path tmp = run / "step-0000002.tmp";
  fs::create_directories(tmp);
  std::ofstream(tmp / "rank-00000.safetensors.tmp") << "partial";
  EXPECT_EQ(resolve_checkpoint_dir(run.string()), (run / "step-0000001").string());
  EXPECT_EQ(list_checkpoints(run.string()).size(), 1u);
  CheckpointSaver::remove_partial_saves(run.string());
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(fs::exists(run / "step-0000001" / "checkpoint.json"));
}

TEST(Checkpoint, AsyncSaveSnapshotsTheStateAtTheCall) {
  State a(1);
  const fs::path r1 = scratch("async"), r2 = scratch("sync");
  const std::vector<float> before(a.model.params().all_values().f32(),
                                  a.model.params().all_values().f32() + a.model.params().numel());
  for (bool async : {true, false}) {
    CheckpointSaver::Options o;
    o.run_dir = (async ? r1 : r2).string();
    o.config_json_path = kTiny;
    o.async = async;
    CheckpointSaver saver(o);
    saver.save(training_state_pieces(a.holder(), true), meta_of(5));
    // Training goes on while the background thread writes: the checkpoint must not see it.
    Tensor v = a.model.params().all_values();
    for (int64_t i = 0; i < v.numel(); ++i) v.f32()[i] += 1.0f;
    saver.wait();
    EXPECT_GT(saver.bytes_written(), 0);
    EXPECT_EQ(saver.last_published(), (fs::path(o.run_dir) / "step-0000005").string());
    std::memcpy(v.f32(), before.data(), v.bytes());
  }
  CheckpointReader x(resolve_checkpoint_dir(r1.string())), y(resolve_checkpoint_dir(r2.string()));
  for (const auto& [name, t] : x.index().tensors)
    ASSERT_EQ(x.read_tensor(name), y.read_tensor(name));
  EXPECT_EQ(x.read_tensor("param/model.norm.weight"),
            std::vector<float>(
                before.begin() + a.model.params().named("model.norm.weight").weight->offset,
                before.begin() + a.model.params().named("model.norm.weight").weight->offset +
                    a.cfg.hidden_size));
}

fs::path shard_of(const std::string& dir) { return fs::path(dir) / "rank-00000.safetensors"; }

TEST(Checkpoint, TruncatedFileIsOneLineNamingFileAndTensor) {
  const std::string dir = save(*std::make_unique<State>(1), scratch("truncated"), 1);
  fs::resize_file(shard_of(dir), fs::file_size(shard_of(dir)) / 2);
  State b(2);
  const std::string e =
      error_of([&] { CheckpointReader(dir).read(training_state_pieces(b.holder(), false)); });
  EXPECT_NE(e.find("rank-00000.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor '"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Checkpoint, FlippedBitIsAChecksumMismatchNamingFileAndTensor) {
  const std::string dir = save(*std::make_unique<State>(1), scratch("bitflip"), 1);
  {
    std::fstream f(shard_of(dir), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(-5, std::ios::end);
    f.write(&c, 1);
  }
  State b(2);
  const std::string e =
      error_of([&] { CheckpointReader(dir).read(training_state_pieces(b.holder(), false)); });
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("rank-00000.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor '"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { CheckpointReader(dir).verify_all(); }).find("checksum mismatch"),
            std::string::npos);
}

TEST(Checkpoint, AnotherModelsCheckpointIsOneLineNamingTheMismatch) {
  const std::string dir = save(*std::make_unique<State>(1), scratch("othermodel"), 1);
  nlohmann::json cfg = read_json_file(kTiny);
  cfg["moe_intermediate_size"] = cfg["moe_intermediate_size"].get<int>() * 2;
  const fs::path other = scratch("othermodel_cfg") / "config.json";
  std::ofstream(other) << cfg.dump();
  CheckpointReader r(dir);
  std::string e = error_of([&] { r.check_model(cfg); });
  EXPECT_NE(e.find("config field 'moe_intermediate_size'"), std::string::npos) << e;
  State b(2, other.string());
  e = error_of([&] { r.check_tensors(training_state_pieces(b.holder(), false), "param/"); });
  EXPECT_NE(e.find("has shape"), std::string::npos) << e;
  EXPECT_NE(e.find("experts"), std::string::npos) << e;
}

TEST(CheckpointIndex, DamagedIndexesAreRejectedWithOneLine) {
  State a(1);
  const std::string dir = save(a, scratch("index"), 1);
  std::ifstream f(fs::path(dir) / "checkpoint.json");
  const std::string good((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NO_THROW(parse_checkpoint_index(good, "ix"));
  nlohmann::json j = nlohmann::json::parse(good);
  const std::string t = "param/model.norm.weight";
  auto broken = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json k = j;
    edit(k);
    return error_of([&] { parse_checkpoint_index(k.dump(), "ix"); });
  };
  EXPECT_NE(
      error_of([&] { parse_checkpoint_index("{not json", "ix"); }).find("ix is not valid JSON"),
      std::string::npos);
  EXPECT_NE(broken([](auto& k) { k.erase("step"); }).find("missing \"step\""), std::string::npos);
  EXPECT_NE(broken([](auto& k) { k["version"] = 99; }).find("version 99"), std::string::npos);
  EXPECT_NE(broken([&](auto& k) { k["tensors"][t]["pieces"][0]["n"] = 1; }).find("cover"),
            std::string::npos);
  EXPECT_NE(broken([&](auto& k) { k["tensors"][t]["pieces"][0]["begin"] = 5; }).find("continue"),
            std::string::npos);
  EXPECT_NE(broken([&](auto& k) {
              k["tensors"][t]["pieces"][0]["file"] = "../../etc/passwd";
            }).find("not in \"files\""),
            std::string::npos);
  EXPECT_NE(broken([&](auto& k) { k["files"][0] = "../x"; }).find("plain file names"),
            std::string::npos);
  EXPECT_NE(broken([&](auto& k) { k["tensors"][t]["pieces"][0]["crc"] = "md5:00"; }).find("crc32c"),
            std::string::npos);
  EXPECT_NE(broken([&](auto& k) { k["tensors"][t]["shape"] = {-1}; }).find("shape"),
            std::string::npos);
  for (const std::string& e :
       {broken([](auto& k) { k["step"] = "x"; }), broken([](auto& k) { k["tensors"] = 3; })})
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(MetricsFile, ResumeKeepsStepsUpToTheCheckpoint) {
  const fs::path p = scratch("metrics") / "m.jsonl";
  std::ofstream(p) << "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4}\n";
  MetricsWriter::keep_steps_up_to(p.string(), 2);
  std::ifstream f(p);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"step\":1}\n{\"step\":2}\n");
}

}  // namespace
}  // namespace moet
