// What a run directory says about its run: run.json (command, model config, where the metrics
// and TensorBoard files are; `moet report` reads it) and the summary printed at the end.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/train_options.h"

namespace moet {

// The data a run read: --data and --split ("95,5" for the default).
struct DataOrigin {
  std::string data, split;
};

// One start of a run: a fresh start, or a resume from a checkpoint.
struct RunStart {
  std::string tensorboard_file;  // the event file this start writes ("" = none)
  bool resuming = false;
  int64_t first_step = 0;  // steps done before this start (the checkpoint's step)
  std::string precision;   // the recipe --precision resolved to ("bf16" for auto on some CPUs)
  // a resume on data other than the checkpoint's: what they were (run.json "data_changed_from")
  std::optional<DataOrigin> data_changed_from;
  nlohmann::json gemm_peaks;  // GemmPeaks::json(): run.json "gemm_peaks"
};

// Writes OUT_DIR/run.json (rank 0, each start of the run, so a resumed run names its newest
// files): {"command", "commands", "segments", "model_config", "model", "metrics", "tensorboard",
// "precision", "options"}; paths absolute; "commands" is every invocation of the run, the first
// first (a resumed start adds its own to the earlier ones); "segments" the same starts as
// {"start_step", "command", "data", "split", "precision"}, a resume whose --data or --split
// differs from its checkpoint's adding "data_changed_from" ({"data", "split"}: what they were;
// `moet report` marks the step on its curves); "precision" the recipe the newest start resolved.
void write_run_info(const TrainOptions& o, const RunStart& start);

struct RunSummary {
  int64_t steps = 0;  // steps this process trained (a resumed run: since the resume)
  int64_t tokens = 0;
  double seconds = 0;
  double best_eval_loss = 0;  // NaN: never evaluated
  int64_t best_eval_step = 0;
  std::string metrics_path, tensorboard_dir, checkpoint, run_dir;
};

// The lines printed when training ends: tokens, time, mean throughput, best held-out loss, and
// where the files are (metrics, TensorBoard, checkpoints, the report command).
std::string format_run_summary(const RunSummary& s);

}  // namespace moet
