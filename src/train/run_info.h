// What a run directory says about its run: run.json (command, model config, where the metrics
// and TensorBoard files are; `moet report` reads it) and the summary printed at the end.
#pragma once
#include <cstdint>
#include <string>

#include "train/train_options.h"

namespace moet {

// Writes OUT_DIR/run.json (rank 0, each start of the run, so a resumed run names its newest
// files): {"command", "commands", "model_config", "model", "metrics", "tensorboard",
// "options"}; paths absolute; "commands" is every invocation of the run, the first first (a
// resumed start, `resuming`, adds its own to the earlier ones). tensorboard_file: the event file
// this start writes ("" = none).
void write_run_info(const TrainOptions& o, const std::string& tensorboard_file, bool resuming);

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
