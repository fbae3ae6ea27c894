#include "train/train_outputs.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/trace.h"
#include "metrics/tensorboard.h"
#include "train/run_info.h"
#include "train/train_options.h"
#include "train/train_options_check.h"

namespace moet {

namespace {

// --metrics and --trace make their folder as --out does.
void make_parent_folder(const std::string& path) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) std::filesystem::create_directories(folder);
}

}  // namespace

TrainOutputs::TrainOutputs(const TrainOptions& o, int rank, int ranks, bool resuming)
    : o_(o), root_(rank == 0), verbose_(rank == 0 && !o.logging.quiet), resuming_(resuming) {
  MOET_CHECK(!root_ || o.logging.metrics_path.empty() || resuming || o.logging.overwrite ||
                 output_absent_or_empty(o.logging.metrics_path),
             "--metrics '", o.logging.metrics_path,
             "' already exists; refusing to overwrite it (pass --overwrite, or choose another "
             "path)");
  if (!o.logging.trace_path.empty()) {  // a trace per rank, refused up front if the file exists
    trace_file_ = TraceRecorder::per_rank_path(o.logging.trace_path, rank, ranks);
    MOET_CHECK(o.logging.overwrite || output_absent_or_empty(trace_file_), "--trace: '",
               trace_file_, "' already exists; refusing to overwrite it (pass --overwrite)");
    trace_ = std::make_unique<TraceRecorder>(rank, "rank " + std::to_string(rank));
    step_lane_ = trace_->lane(trace::kStepsLane);  // the top lane: steps and evaluations
  }
}

TrainOutputs::~TrainOutputs() = default;

void TrainOutputs::open(int64_t resume_step, const RunStart& start) {
  if (root_ && !o_.logging.metrics_path.empty()) {
    make_parent_folder(o_.logging.metrics_path);
    if (resuming_) {  // continue the interrupted run's file from the checkpoint's step
      MetricsWriter::keep_steps_up_to(o_.logging.metrics_path, resume_step);
      metrics_ =
          std::make_unique<MetricsWriter>(o_.logging.metrics_path, MetricsWriter::Mode::kAppend);
    } else {
      // replaces only what the constructor allowed: --overwrite, or an empty file
      metrics_ = std::make_unique<MetricsWriter>(
          o_.logging.metrics_path,
          o_.logging.overwrite || std::filesystem::exists(o_.logging.metrics_path));
    }
  }
  if (root_ && !o_.logging.tensorboard_dir.empty())
    tensorboard_ = std::make_unique<TensorBoardWriter>(o_.logging.tensorboard_dir);
  if (tensorboard_ && resuming_) tensorboard_->mark_resume(start.first_step + 1);
  if (root_ && !o_.checkpoint.out_dir.empty()) {
    RunStart s = start;
    s.tensorboard_file = tensorboard_ ? tensorboard_->path() : "";
    s.resuming = resuming_;
    write_run_info(o_, s);
  }
}

void TrainOutputs::write(StepMetrics& m, bool log_now) {
  interval_.add(m);
  if (log_now && o_.logging.log_every > 1) interval_.fill(m);
  if (metrics_) metrics_->write(m);
  if (tensorboard_) tensorboard_->write(m);
  if (tensorboard_ && log_now) tensorboard_->flush();
  if (verbose_ && log_now) {
    std::printf("%s\n", format_progress_line(m).c_str());
    std::fflush(stdout);
  } else if (verbose_ && std::isfinite(m.eval_loss)) {  // an evaluation between progress lines
    std::printf("%s\n", format_eval_line(m).c_str());
    std::fflush(stdout);
  }
}

void TrainOutputs::close() {
  if (trace_) {  // checked at the start; its folder made as --out's is
    make_parent_folder(trace_file_);
    trace_->write(trace_file_, true);
  }
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace moet
