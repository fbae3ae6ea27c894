// Per-step training metrics (the record: metrics/step_metrics.h): a compact progress line for the
// terminal and a JSONL writer (one JSON object per step, flushed as written). Every field is
// explained in docs/metrics.md (the glossary); keep it true when a field changes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "metrics/step_metrics.h"

namespace moet {

// The line for a held-out evaluation at a step that prints no progress line (--eval-every and
// --log-every not aligned): "step 150/300 | eval 4.1234 ± 0.0123 (held-out loss)".
std::string format_eval_line(const StepMetrics& m);

// One line, e.g. "step  12/100 | loss 5.4321 (lm 5.4012 mtp 5.6930) | lr 3.00e-04 |
// gnorm 1.234 | 1.23k tok/s | 0.152 TFLOP/s | MFU 12.3% | load max/mean 1.42 | 0.52 s/step |
// ETA 0:00:45". With interval means (interval_steps > 0) the loss, tok/s, TFLOP/s, MFU and
// s/step are the interval's, led by "mean of 10 steps:", and the rest are the step's, led by
// "step 12:". Under mpirun tok/s reads "tok/s (global)" and TFLOP/s "TFLOP/s/rank".
std::string format_progress_line(const StepMetrics& m);

// The means over a logging interval: add() every step's metrics, fill() at a step that prints
// (sets the interval_* fields and starts a new interval). Loss (and its lm and MTP parts) and
// step time are arithmetic means of the steps'; tokens/s, TFLOP/s and MFU are the interval's
// tokens (FLOPs) over its seconds, i.e. Σ rate·step_time / Σ step_time — as Megatron derives
// throughput from the mean iteration time.
class IntervalMeans {
 public:
  void add(const StepMetrics& m);
  // No-op when no step was added since the last fill().
  void fill(StepMetrics& m);
  int64_t steps() const { return n_; }

 private:
  int64_t n_ = 0;
  double loss_ = 0, lm_ = 0, mtp_ = 0, seconds_ = 0, tokens_ = 0, tflop_ = 0, mfu_s_ = 0;
};
// Seconds as h:mm:ss ("-:--:--" when negative or not finite).
std::string format_hms(double seconds);

class MetricsWriter {
 public:
  enum class Mode { kCreate, kOverwrite, kAppend };
  // kCreate refuses (moet::Error) when `path` exists; kAppend continues a file (resume).
  MetricsWriter(const std::string& path, Mode mode);
  // overwrite false: kCreate; true: kOverwrite.
  MetricsWriter(const std::string& path, bool overwrite);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // A resumed run continues a metrics file: keeps its lines up to and including `step` (the
  // checkpoint's) and drops later ones (steps the interrupted run did after that checkpoint),
  // rewriting the file atomically. A missing file is fine.
  static void keep_steps_up_to(const std::string& path, int64_t step);
  // Appends one line and flushes it.
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace moet
