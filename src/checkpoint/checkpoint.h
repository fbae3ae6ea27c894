// moet's checkpoint format (docs/checkpoints.md): a run directory holds one directory per
// checkpoint and a `latest` pointer written last:
//
//   RUN_DIR/step-0000100/checkpoint.json          the index: step, data cursor, optimizer and
//                                                   schedule position, layout, command line, the
//                                                   model config, and for every global tensor
//                                                   its shape and pieces (file, key, range, CRC)
//   RUN_DIR/step-0000100/config.json               the model's Hugging Face config.json
//   RUN_DIR/step-0000100/rank-00000.safetensors    the pieces one process wrote (fp32; moments
//                                                   kept in bf16 are stored in bf16)
//   RUN_DIR/latest                                 "step-0000100\n"
//
// A checkpoint is written under `step-NNNNNNN.tmp`, each file made durable (fsync) before the
// directory is renamed to its final name and `latest` replaced (write, fsync, rename), so a
// process killed at any moment leaves the previous checkpoint loadable.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/training_state.h"

namespace moet {

class ParamStore;

// "step-0000100"
std::string step_dir_name(int64_t step);
// The newest complete checkpoint in run_dir, if any. `latest` names it too, except when a
// process was killed between publishing a checkpoint and replacing `latest`.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);
// PATH: a run directory (its `latest` checkpoint) or a `step-NNNNNNN` directory; throws
// moet::Error if it is neither.
std::string resolve_checkpoint_dir(const std::string& path);
// The tokenizer a run trained with, for commands that read its checkpoints (generate, eval):
// `flag` when given, else the tokenizer.json `moet train` kept in the step's run directory (or
// beside the step's weights), else `fallback`.
std::string run_tokenizer_spec(const std::string& flag, const std::string& step_dir,
                               const std::string& fallback = "byte");
// Keeps the run's tokenizer in run_dir/tokenizer.json: `spec` "byte" keeps nothing (and refuses a
// run directory that holds a tokenizer.json); a tokenizer.json path is copied there durably when
// `copy` (one process of a run copies), or, when the run directory has one already (a resumed
// run), must be byte for byte the same file.
void keep_run_tokenizer(const std::string& run_dir, const std::string& spec, bool copy);
// Every complete checkpoint directory under run_dir with its step, ascending.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);

// Writes this process's pieces to dir/rank-RRRRR.safetensors (durably; the piece list and
// checksums go in its metadata). Returns the bytes written.
int64_t write_rank_shard(const std::string& dir, int rank, const std::vector<StatePiece>& pieces);

// Rank 0, once every rank's shard is in tmp_dir (it waits up to wait_s seconds for each to
// appear): writes config.json (a copy of config_json_path) and checkpoint.json (`meta` plus
// the shards' piece lists, checked to cover every tensor once) and makes them durable.
void seal_checkpoint(const std::string& tmp_dir, int ranks, CheckpointIndex meta,
                     const std::string& config_json_path, double wait_s = 600);
// Then: renames tmp_dir to run_dir/step-NNNNNNN, replaces `latest` (durably), and removes all
// but the newest keep_last checkpoints (0: keep all). Returns the final directory.
std::string publish_checkpoint(const std::string& run_dir, const std::string& tmp_dir, int64_t step,
                               int64_t keep_last);

// Reads a committed checkpoint.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& step_dir);
  const CheckpointIndex& index() const { return index_; }
  const std::string& dir() const { return dir_; }
  // Checks the model config equals `model_config` (one line naming the first field that
  // differs), then that every piece's tensor exists with the piece's global shape and that
  // the checkpoint has no tensor of `kind` ("param/", "adam_m/", ...) outside `pieces`' names.
  void check_model(const nlohmann::json& model_config) const;
  // complete = false: `pieces` are one pipeline stage's, so the checkpoint may hold more.
  void check_tensors(const std::vector<StatePiece>& pieces, const std::string& kind,
                     bool complete = true) const;
  // Fills every piece from the stored pieces that overlap it, verifying each stored piece's
  // checksum before use (one line naming the file and tensor on a mismatch or a truncated
  // file), converting a stored dtype to the piece's (bf16 to fp32 exactly, fp32 to bf16 rounded
  // to nearest even). Nothing is written to disk.
  void read(const std::vector<StatePiece>& pieces) const;
  // A whole global tensor, put together from its pieces (checksums verified), as fp32 (a bf16
  // tensor widened exactly).
  std::vector<float> read_tensor(const std::string& name) const;
  // Verifies every stored piece; returns the bytes checked.
  int64_t verify_all() const;

 private:
  const unsigned char* stored(const PieceRef& p, const std::string& tensor) const;
  std::string dir_;
  CheckpointIndex index_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
  mutable std::map<std::pair<std::string, std::string>, bool> verified_;
};

// Parameter values only (Hugging Face interop, evaluation): loads every weight of `ps` (any
// layout wrote the checkpoint) and marks ps updated.
void load_checkpoint_weights(const std::string& step_dir, ParamStore& ps, bool complete = true);
// Writes a weights-only checkpoint (step 0, no optimizer state) of a one-process model.
void save_weights_checkpoint(const std::string& step_dir, const ParamStore& ps,
                             const std::string& config_json_path);

// The config.json text of a file (for CheckpointIndex::model_config), parsed.
nlohmann::json read_json_file(const std::string& path);

}  // namespace moet
