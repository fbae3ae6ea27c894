// Writes the fuzzers' seed corpora (fuzz/corpus/) with moet's own writers, so the seeds are
// files moet really produces: small safetensors files, checkpoint.json indexes and Megatron
// indexes (.idx, after the two bytes that give the fuzz target its .bin size).
// Build it from the repository root with the checkpoint sources it uses and run it there:
//   clang++ -std=c++20 -Isrc fuzz/make_seed_corpus.cpp src/checkpoint/safetensors.cpp
//     src/checkpoint/checkpoint_index.cpp src/core/crc32c.cpp src/core/error.cpp
//     src/core/tensor.cpp src/data/indexed_dataset.cpp -o /tmp/make_seed_corpus   (one command)
//   /tmp/make_seed_corpus fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "data/indexed_dataset.h"

namespace fs = std::filesystem;
using moet::StDType;

namespace {

void write_safetensors_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const std::vector<float> weights = {0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 7.75f};
  const std::vector<int32_t> ids = {-7, 0, 1, 2147483647};

  // Two tensors and metadata: what a small checkpoint shard looks like.
  moet::write_safetensors((dir / "two_tensors.safetensors").string(),
                          {{"layers.0.w", StDType::F32, {2, 3}, weights.data()},
                           {"ids", StDType::I32, {4}, ids.data()}},
                          {{"format", "pt"}, {"step", "12"}});

  // One small tensor of every dtype the format names.
  const std::vector<uint8_t> bytes = {0, 1, 2, 255, 128, 7, 9, 1, 0, 3, 5, 6, 250, 4, 8, 10};
  const std::vector<double> doubles = {1.0, -2.5};
  const std::vector<int64_t> longs = {-1, 4294967296};
  const std::vector<uint16_t> halves = {moet::bf16_bits(1.5f), 0x3C00 /* f16 1.0 */};
  moet::write_safetensors((dir / "every_dtype.safetensors").string(),
                          {{"bool", StDType::BOOL, {2}, bytes.data()},
                           {"u8", StDType::U8, {2}, bytes.data()},
                           {"i8", StDType::I8, {2}, bytes.data()},
                           {"u16", StDType::U16, {2}, bytes.data()},
                           {"i16", StDType::I16, {2}, bytes.data()},
                           {"f16", StDType::F16, {2}, halves.data()},
                           {"bf16", StDType::BF16, {2}, halves.data()},
                           {"u32", StDType::U32, {2}, bytes.data()},
                           {"i32", StDType::I32, {2}, ids.data()},
                           {"f32", StDType::F32, {2}, weights.data()},
                           {"u64", StDType::U64, {2}, bytes.data()},
                           {"i64", StDType::I64, {2}, longs.data()},
                           {"f64", StDType::F64, {2}, doubles.data()}});

  // A scalar, an empty tensor and a 4-d tensor.
  moet::write_safetensors((dir / "scalar_empty_4d.safetensors").string(),
                          {{"scalar", StDType::F32, {}, weights.data()},
                           {"empty", StDType::BF16, {0, 3}, nullptr},
                           {"four_d", StDType::F32, {1, 2, 1, 3}, weights.data()}});

  // No tensors at all.
  moet::write_safetensors((dir / "no_tensors.safetensors").string(), {});
}

void write_index_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  // Two tensors in three pieces over two rank files.
  moet::CheckpointIndex ix;
  ix.step = 12;
  ix.consumed_samples = 96;
  ix.tokens = 12288;
  ix.seed = 1234;
  ix.data_cursor = 12;
  ix.global_batch = 8;
  ix.adam_steps = 12;
  ix.run = {{"precision", "bf16"}, {"ep", 2}, {"lr", 3e-4}, {"argv", {"moet", "train"}}};
  ix.model_config = {{"hidden", 64}, {"layers", 2}, {"experts", 4}, {"rope_theta", 10000.0}};
  ix.files = {"rank-00000.safetensors", "rank-00001.safetensors"};
  ix.tensors["embed.weight"] = {
      {16, 64},
      {{"rank-00000.safetensors", "embed.weight", 0, 512, moet::crc32c("a", 1)},
       {"rank-00001.safetensors", "embed.weight", 512, 512, 0xdeadbeefu}}};
  ix.tensors["layers.0.expert_bias"] = {
      {4}, {{"rank-00000.safetensors", "layers.0.expert_bias", 0, 4, 0}}};
  std::ofstream(dir / "two_tensors_three_pieces.json") << moet::format_checkpoint_index(ix);

  moet::CheckpointIndex empty;
  std::ofstream(dir / "no_tensors.json") << moet::format_checkpoint_index(empty);
}

// A dataset written by IndexedDatasetWriter, as the fuzz input: .bin size (u16) then the .idx.
void write_indexed_seed(const fs::path& dir, const std::string& name, moet::IndexedDType dtype,
                        const std::vector<std::vector<int32_t>>& docs) {
  const std::string prefix = (dir / ("tmp_" + name)).string();
  {
    moet::IndexedDatasetWriter w(prefix, dtype, true);
    for (const auto& d : docs) w.add_document(d);
    w.finish();
  }
  std::ifstream in(prefix + ".idx", std::ios::binary);
  const std::string idx((std::istreambuf_iterator<char>(in)), {});
  const auto bin = static_cast<uint16_t>(fs::file_size(prefix + ".bin"));
  std::ofstream out(dir / (name + ".idx"), std::ios::binary);
  out.put(char(bin & 0xFF)).put(char(bin >> 8)) << idx;
  fs::remove(prefix + ".idx");
  fs::remove(prefix + ".bin");
}

void write_indexed_dataset_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  write_indexed_seed(dir, "uint16_three_docs", moet::IndexedDType::kU16,
                     {{1, 2, 3}, {256}, {7, 8}});
  write_indexed_seed(dir, "int32_with_empty_doc", moet::IndexedDType::kI32,
                     {{100000, 5}, {}, {129279}});
  write_indexed_seed(dir, "no_documents", moet::IndexedDType::kU16, {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  try {
    write_safetensors_seeds(fs::path(argv[1]) / "safetensors");
    write_index_seeds(fs::path(argv[1]) / "checkpoint_index");
    write_indexed_dataset_seeds(fs::path(argv[1]) / "indexed_dataset");
  } catch (const moet::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
