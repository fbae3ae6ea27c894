// checkpoint.json, the index of a checkpoint (docs/checkpoints.md): the run's position (step,
// data cursor, optimizer steps), its settings and model config, and for every global tensor its
// shape, its dtype when not fp32, and the pieces that hold it (file, key, element range, CRC-32C).
// Parsing validates everything a reader relies on, so a damaged or hostile index is one error line,
// never a crash (a fuzzer checks this: fuzz/).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moet {

struct PieceRef {
  std::string file;  // file name inside the checkpoint directory
  std::string key;   // tensor name inside that safetensors file
  int64_t begin = 0;
  int64_t n = 0;
  uint32_t crc = 0;  // CRC-32C of the piece's bytes
};

struct TensorEntry {
  std::vector<int64_t> shape;
  bool bf16 = false;  // stored as bf16 ("dtype": "BF16": AdamW moments kept in bf16), else fp32
  std::vector<PieceRef> pieces;  // ordered by begin; together they cover the tensor once
};

struct CheckpointIndex {
  static constexpr int kVersion = 1;
  int64_t step = 0;              // optimizer steps done
  int64_t consumed_samples = 0;  // sequences trained on
  int64_t tokens = 0;
  uint64_t seed = 0;         // initialisation and data seed (the data cursor's key)
  int64_t data_cursor = 0;   // the next training step's batch
  int64_t global_batch = 0;  // sequences per step
  int64_t adam_steps = 0;    // AdamW's step count (bias correction)
  nlohmann::json run = nlohmann::json::object();  // precision, layout, schedule, command line
  nlohmann::json model_config = nlohmann::json::object();  // the config.json
  std::map<std::string, TensorEntry> tensors;
  std::vector<std::string> files;  // the data files, rank-RRRRR.safetensors

  int64_t total_bytes() const;
};

// Parses (validating every field and piece: ranges inside the tensor, pieces covering it
// exactly once, files named plainly; one moet::Error line naming `source` and the problem) and
// formats checkpoint.json.
CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& source);
std::string format_checkpoint_index(const CheckpointIndex& index);

// "crc32c:xxxxxxxx" to its value; one moet::Error line naming `context` if malformed.
uint32_t parse_crc32c_string(const std::string& s, const std::string& context);
// A file name without directories ("rank-00000.safetensors"), as an index may name.
bool plain_file_name(const std::string& name);
// "[2, 3]"
std::string shape_text(const std::vector<int64_t>& shape);
// The element count of a shape.
int64_t shape_numel(const std::vector<int64_t>& shape);

}  // namespace moet
