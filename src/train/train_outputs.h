// What `moet train` writes as it goes, rank 0 unless said: the metrics file (JSONL), TensorBoard
// event files, the progress lines (--log-every's means), run.json, and every rank's trace. The
// files are checked before the run starts (nothing is overwritten without --overwrite) and
// created only once it is known to start, so a refused run leaves nothing behind.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "metrics/progress.h"
#include "train/run_info.h"

namespace moet {

struct TrainOptions;
class TensorBoardWriter;
class TraceRecorder;

class TrainOutputs {
 public:
  // Refuses outputs that exist (--metrics unless resuming, --trace) before anything is written;
  // starts this rank's trace recorder when --trace asks for one.
  TrainOutputs(const TrainOptions& o, int rank, int ranks, bool resuming);
  ~TrainOutputs();
  TrainOutputs(const TrainOutputs&) = delete;
  TrainOutputs& operator=(const TrainOutputs&) = delete;

  // Creates the files: the metrics file (a resumed run's continued after resume_step, the
  // checkpoint's), TensorBoard (marking the resume at first_step + 1) and, with --out, run.json.
  void open(int64_t resume_step, const RunStart& start);
  // Null without --trace.
  TraceRecorder* trace() const { return trace_.get(); }
  // The lane steps and evaluations are drawn on (0 without --trace).
  int step_lane() const { return step_lane_; }
  // A step's record: into the metrics file and TensorBoard every step; when log_now, replaced by
  // the means since the last line (--log-every > 1), TensorBoard flushed and the progress line
  // printed.
  void write(StepMetrics& m, bool log_now);
  // Writes the trace file, flushes TensorBoard.
  void close();

 private:
  const TrainOptions& o_;
  const bool root_, verbose_, resuming_;
  std::string trace_file_;
  std::unique_ptr<TraceRecorder> trace_;
  int step_lane_ = 0;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  IntervalMeans interval_;  // --log-every > 1: the progress line's means
};

}  // namespace moet
