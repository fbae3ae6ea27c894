// Regressions for the checkpoint parser bugs found while fuzzing them (fuzz/README.md): each
// input here once crashed, overflowed or was wrongly accepted; now it is one moet::Error, or,
// for empty tensors, reads that succeed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/json_depth_limit.h"
#include "core/tensor.h"
#include "error_of.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

using test::error_of;

class ParserFuzzFindings : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("moet_fuzz_findings_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A safetensors file of `header` and `data`; returns its path.
  std::string safetensors_file(const std::string& header, const std::string& data = "") const {
    const std::string path = (dir_ / "t.safetensors").string();
    const uint64_t n = header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    std::ofstream(path, std::ios::binary) << bytes << header << data;
    return path;
  }
  fs::path dir_;
};

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A checkpoint.json around `run` and `tensors` (JSON texts).
std::string index_text(const std::string& run, const std::string& tensors) {
  return R"({"format": "moet-checkpoint", "version": 1, "step": 0, "consumed_samples": 0,
             "tokens": 0, "seed": 0, "data_cursor": 0, "global_batch": 0, "adam_steps": 0,
             "run": )" +
         run + R"(, "model_config": {}, "files": ["rank-00000.safetensors"], "tensors": )" +
         tensors + "}";
}

// The byte count of shape [2^62] F32 is 2^64, which wrapped to 0 and matched data_offsets
// [0, 0]: the reader accepted a 2^62-element tensor stored in no bytes.
TEST_F(ParserFuzzFindings, SafetensorsByteCountThatWrapsIsRejected) {
  for (const char* header : {
           R"({"t": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})",
           R"({"t": {"dtype": "F64", "shape": [2, 1152921504606846976], "data_offsets": [0, 0]}})",
       })
    EXPECT_NE(error_of([&] { SafetensorsReader r(safetensors_file(header)); }).find("too large"),
              std::string::npos)
        << header;
}

// Nesting 100,000 arrays parsed fine but overflowed the stack when the header was printed in an
// error message (a shape entry, a metadata value).
TEST_F(ParserFuzzFindings, SafetensorsDeepNestingIsAnError) {
  const std::string deep = nested_arrays(100000);
  for (const std::string& header :
       {R"({"t": {"dtype": "F32", "shape": [)" + deep + R"(], "data_offsets": [0, 0]}})",
        R"({"__metadata__": {"k": )" + deep + "}}"})
    EXPECT_NE(error_of([&] {
                SafetensorsReader r(safetensors_file(header));
              }).find("corrupt JSON header: JSON nested deeper than 64 levels"),
              std::string::npos);
}

// Nesting in "run" overflowed the stack when the parsed value was copied into the index.
TEST_F(ParserFuzzFindings, CheckpointIndexDeepNestingIsAnError) {
  const std::string text = index_text(R"({"x": )" + nested_arrays(100000) + "}", "{}");
  EXPECT_NE(error_of([&] {
              parse_checkpoint_index(text, "checkpoint.json");
            }).find("checkpoint.json: JSON nested deeper than 64 levels"),
            std::string::npos);
}

TEST_F(ParserFuzzFindings, NestingUpToTheLimitIsAccepted) {
  // The index object, "run" and "x" hold kMaxJsonDepth levels: accepted; one more is not.
  const std::string ok = index_text(R"({"x": )" + nested_arrays(kMaxJsonDepth - 2) + "}", "{}");
  EXPECT_EQ(parse_checkpoint_index(ok, "checkpoint.json").run["x"].size(), 1u);
  const std::string deeper = index_text(R"({"x": )" + nested_arrays(kMaxJsonDepth - 1) + "}", "{}");
  EXPECT_NE(error_of([&] {
              parse_checkpoint_index(deeper, "checkpoint.json");
            }).find("nested deeper than"),
            std::string::npos);
  // Values inside the deepest level are not a level of their own.
  const std::string levels(kMaxJsonDepth - 2, '['), ends(kMaxJsonDepth - 2, ']');
  const std::string values =
      index_text(R"({"x": )" + levels + R"(1, "s", null)" + ends + "}", "{}");
  EXPECT_EQ(parse_checkpoint_index(values, "checkpoint.json").run["x"].size(), 1u);
}

// Every tensor may hold up to 2^50 elements; 2^13 + 1 of them made total_bytes() (and `moet
// checkpoint inspect`'s sums) overflow int64.
TEST_F(ParserFuzzFindings, CheckpointIndexTotalElementsAreBounded) {
  auto tensors = [](int count) {
    std::string s = "{";
    for (int i = 0; i < count; ++i)
      s += (i ? ", \"t" : "\"t") + std::to_string(i) +
           R"(": {"shape": [33554432, 33554432], "pieces": [{"file": "rank-00000.safetensors",
              "key": "k", "begin": 0, "n": 1125899906842624, "crc": "crc32c:00000000"}]})";
    return s + "}";
  };
  EXPECT_EQ(parse_checkpoint_index(index_text("{}", tensors(1)), "c.json").total_bytes(),
            int64_t{1} << 52);
  EXPECT_NE(error_of([&] {
              parse_checkpoint_index(index_text("{}", tensors(2)), "c.json");
            }).find("more than 2^50 elements in all"),
            std::string::npos);
}

// An empty I32 or BF16 tensor was copied with memcpy into a destination that may be null
// (undefined even for 0 bytes; UBSan reported it under the fuzzer).
TEST_F(ParserFuzzFindings, EmptyTensorsReadIntoEmptyDestinations) {
  const std::string path = safetensors_file(
      R"({"i": {"dtype": "I32", "shape": [0], "data_offsets": [0, 0]},
          "b": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [0, 0]}})");
  SafetensorsReader r(path);
  EXPECT_TRUE(r.read_i32("i").empty());
  r.read_into("i", Tensor(nullptr, DType::I32, {0}));
  r.read_into("b", Tensor(nullptr, DType::BF16, {0, 3}));
}

}  // namespace
