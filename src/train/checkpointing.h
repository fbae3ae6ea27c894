// How `moet train` uses checkpoints (docs/checkpoints.md): which one a run resumes from,
// restoring the training state from it under any layout, and saving at step boundaries.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "checkpoint/async_saver.h"
#include "checkpoint/training_state.h"
#include "train/run_info.h"
#include "train/train_options.h"

namespace moet {

class Communicator;
class AdamW;

// What fixes the order of the data (the cursor is the step; docs/checkpoints.md): a resumed
// run must have the same.
struct DataShape {
  uint64_t seed = 0;
  int64_t seq = 0;
  int64_t grad_accum = 0;
  int64_t global_batch = 0;  // sequences per step over all ranks
};

// The options of the run that saved a checkpoint: checkpoint.json's run.options (a checkpoint of
// an earlier moet: the flat fields of run it recorded); nullopt when it records none (an imported
// checkpoint). `where` names the file in an error line.
std::optional<TrainOptions> checkpoint_run_options(const nlohmann::json& run,
                                                   const std::string& where);

class TrainCheckpoints {
 public:
  // Resolves --resume against --out and refuses what would lose or overwrite a checkpoint: a
  // fresh start into an --out that holds checkpoints, or resuming step N into an --out that
  // holds checkpoints after N. Every rank resolves the same (shared storage).
  // Creates nothing: open() does.
  TrainCheckpoints(const TrainOptions& o, Communicator* world);
  // Once the run is known to start: creates --out, removes partial saves of an interrupted run,
  // keeps the tokenizer there and starts the saver (every rank).
  void open();
  ~TrainCheckpoints();

  // The checkpoint a run resumes from; "" for a fresh start.
  const std::string& resume_dir() const { return resume_dir_; }
  // What changes of the learning-rate schedule the resume accepted
  // (--override-opt-param-scheduler), to print; "" when none.
  const std::string& schedule_note() const { return schedule_note_; }
  // The data the resume changed to (--data or --split other than the checkpoint's), to print;
  // "" when the same. run.json records it too (run_info.h, "data_changed_from").
  const std::string& data_note() const { return data_note_; }
  // The AdamW moments the resume converted (the checkpoint's dtype other than --exp-avg-dtype or
  // --exp-avg-sq-dtype), to print; "" when none.
  const std::string& moments_note() const { return moments_note_; }
  const std::optional<DataOrigin>& data_changed_from() const { return data_changed_from_; }
  int64_t resume_step() const { return resume_step_; }
  // The GEMM operand store ("bf16", "fp32") the resumed checkpoint's run recorded; "" if none.
  const std::string& recorded_gemm_operands() const { return recorded_gemm_operands_; }
  // The recipe the resumed checkpoint's run resolved --precision to ("" if none).
  const std::string& recorded_precision() const { return recorded_precision_; }
  bool saving() const { return saver_ != nullptr; }

  // Loads the state `h` holds (parameters, moments, AdamW's step count) after checking the
  // model config, the data shape and every tensor; returns the steps the checkpoint had done.
  int64_t restore(const StateHolder& h, AdamW& adamw, const DataShape& data);

  // Records a setting of the run in every checkpoint it saves (e.g. the resolved precision).
  void note(const std::string& key, const nlohmann::json& value) { run_[key] = value; }
  // Sets aside the memory a save copies the state into (when saving).
  // Returns its bytes.
  int64_t prepare(const StateHolder& h);
  // Whether a checkpoint is due after `steps_done` steps.
  bool due(int64_t steps_done, bool last_step) const;
  // Saves the state after `steps_done` steps; returns the seconds it held up the step.
  double save(int64_t steps_done, const StateHolder& h, const AdamW& adamw, const DataShape& data);
  // Waits for the save in flight; returns the checkpoint it published (rank 0), else "".
  std::string finish();
  // The last completed write of this process: bytes and seconds (after finish()).
  int64_t last_bytes() const { return saver_ ? saver_->bytes_written() : 0; }
  double last_write_seconds() const { return saver_ ? saver_->write_seconds() : 0; }
  // The newest published checkpoint of --out ("" if none).
  std::string newest() const;

 private:
  const TrainOptions& o_;
  Communicator* world_;
  std::string resume_dir_, schedule_note_, data_note_, moments_note_;
  std::optional<DataOrigin> data_changed_from_;
  std::string recorded_gemm_operands_, recorded_precision_;
  int64_t resume_step_ = 0;
  nlohmann::json model_config_;
  nlohmann::json run_;  // the run's settings, recorded in every checkpoint
  std::unique_ptr<CheckpointSaver> saver_;
};

}  // namespace moet
