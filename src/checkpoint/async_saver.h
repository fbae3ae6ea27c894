// CheckpointSaver: saves training state at a step boundary without stopping training for the
// write. save() copies this process's pieces into memory of its own (the only part the step
// waits for) and a background thread writes them; on rank 0 it then waits for every rank's
// shard, seals the checkpoint and publishes it (src/checkpoint/checkpoint.h). A save waits for
// the previous one; errors of a background write surface at the next save() or wait().
#pragma once
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace moet {

class CheckpointSaver {
 public:
  struct Options {
    std::string run_dir;
    std::string config_json_path;  // the model's config.json, copied into each checkpoint
    int rank = 0;
    int ranks = 1;
    int64_t keep_last = 0;  // 0: keep every checkpoint
    bool async = true;      // false: save() returns when the checkpoint is published
  };
  explicit CheckpointSaver(Options o);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Removes what an interrupted save left behind (step-*.tmp directories). Rank 0, before any
  // rank saves.
  static void remove_partial_saves(const std::string& run_dir);

  // Makes the snapshot memory for `pieces` now (touched, so the first save does not pay for
  // page faults inside a step).
  void reserve(const std::vector<StatePiece>& pieces);
  // meta: everything but the tensor and file lists (the shards give those).
  void save(const std::vector<StatePiece>& pieces, const CheckpointIndex& meta);
  // Waits for the save in flight and rethrows its error.
  void wait();

  // Seconds the last save() held up the step (waiting for the previous save, copying).
  double stall_seconds() const { return stall_s_; }
  // Seconds the last completed write took and the bytes this process wrote; the checkpoint
  // directory it published (rank 0; "" elsewhere).
  double write_seconds() const { return write_s_; }
  int64_t bytes_written() const { return bytes_; }
  const std::string& last_published() const { return published_; }

 private:
  void write(CheckpointIndex meta);
  Options o_;
  std::vector<float> snapshot_;
  std::vector<StatePiece> pieces_;  // into snapshot_
  std::thread worker_;
  std::exception_ptr error_;
  double stall_s_ = 0, write_s_ = 0;
  int64_t bytes_ = 0;
  std::string published_;
};

}  // namespace moet
