#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/trace.h"
#include "metrics/progress.h"
#include "parallel/communicator.h"
#include "train/checkpointing.h"
#include "train/evaluation.h"
#include "train/run_info.h"
#include "train/stop_signal.h"
#include "train/train_session.h"
#include "train/train_step.h"

namespace moet {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A step whose loss is not finite updated nothing: say so, or end the run once more of them came
// than --skip-nonfinite allows, naming the last good checkpoint.
void skip_step(TrainSession& s, int64_t step, const StepResult& r, int64_t skipped) {
  const char* what = std::isnan(r.losses.loss) ? "NaN" : "infinite";
  if (skipped > s.o.checkpoint.skip_nonfinite) {
    s.checkpoints->finish();  // the save in flight, if any, is good: it precedes this step
    const std::string good = s.checkpoints->newest();
    MOET_FAIL("training diverged at step ", step + 1, ": the loss is ", what, " (", skipped - 1,
              " such steps skipped, --skip-nonfinite ", s.o.checkpoint.skip_nonfinite, "); ",
              good.empty() ? std::string("no checkpoint was saved")
                           : "the last good checkpoint is " + good,
              "; try a lower --lr");
  }
  if (s.verbose)
    std::printf("step %lld skipped: the loss is %s (%lld of --skip-nonfinite %lld)\n",
                (long long)(step + 1), what, (long long)skipped,
                (long long)s.o.checkpoint.skip_nonfinite);
}

// --eval-every steps and after the last: the held-out loss (every rank takes part).
bool evaluation_due(const TrainOptions& o, int64_t steps_done) {
  return (o.logging.eval_every > 0 && steps_done % o.logging.eval_every == 0) ||
         (steps_done == o.optim.steps && o.logging.eval_batches > 0);
}

HeldOutLoss evaluate_now(TrainSession& s) {
  TraceRecorder::Span span(s.outputs->trace(), s.outputs->step_lane(), "eval", trace::kEval);
  const HeldOutLoss loss = evaluate_in_training(*s.par, s.o.data.micro_batch, *s.data,
                                                s.o.logging.eval_batches, s.tokens(), s.world);
  s.recorder->forget_exchanges();  // evaluation's exchanges belong to no training step
  return loss;
}

// A stop signal (SIGTERM, SIGINT) on any rank stops every rank after the same step.
bool agree_on_stop(Communicator* world) {
  bool stop = StopSignal::received() != 0;
  if (world) {
    double any = stop ? 1 : 0;
    world->allreduce_sum(&any, 1);
    stop = any > 0;
  }
  return stop;
}

// Saves when --save-every says so, after the last step, and on a stop; returns the seconds the
// step waited for it (NaN when nothing was saved). A periodic save says so in one line.
double save_if_due(TrainSession& s, int64_t steps_done, bool last, bool stop) {
  TrainCheckpoints& c = *s.checkpoints;
  if (!c.due(steps_done, last) && !(stop && c.saving())) return StepMetrics::kNone;
  const double waited = c.save(steps_done, s.state, s.runner->optimizer(), s.data_shape);
  if (s.verbose && !last && !stop)  // the last one is reported with the summary
    std::printf("checkpoint: step %lld -> %s/step-%07lld (the step waited %.3f s%s)\n",
                (long long)steps_done, s.o.checkpoint.out_dir.c_str(), (long long)steps_done,
                waited, s.o.checkpoint.sync_save ? "" : "; written in the background");
  return waited;
}

// How the run ended: the stop, the last checkpoint, and the summary.
void print_end(TrainSession& s, const std::string& saved, bool stopped, int64_t steps_done,
               double seconds, double best_eval, int64_t best_eval_step) {
  if (s.rank == 0 && stopped) {
    const int sig = StopSignal::received();
    std::printf(
        "moet: stopped by %s after step %lld; %s\n",
        sig ? StopSignal::name(sig) : "a signal to another rank", (long long)steps_done,
        saved.empty() ? "no checkpoint saved (no --out)" : ("checkpoint at " + saved).c_str());
  } else if (s.verbose && !saved.empty()) {
    const double mb = double(s.checkpoints->last_bytes()) / 1e6;
    const double ws = s.checkpoints->last_write_seconds();
    std::printf("checkpoint: %s (rank 0 wrote %.1f MB in %.2f s, %.2f GB/s)\n", saved.c_str(), mb,
                ws, ws > 0 ? mb / 1e3 / ws : 0.0);
  }
  if (s.verbose) {
    RunSummary sum;
    sum.steps = steps_done - s.first_step;
    sum.tokens = sum.steps * s.recorder->tokens_per_step();
    sum.seconds = seconds;
    sum.best_eval_loss = best_eval;
    sum.best_eval_step = best_eval_step;
    sum.metrics_path = s.o.logging.metrics_path;
    sum.tensorboard_dir = s.o.logging.tensorboard_dir;
    sum.checkpoint = saved;
    sum.run_dir = s.o.checkpoint.out_dir;
    std::printf("%s", format_run_summary(sum).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

double run_training(const TrainOptions& o, Communicator* world, SetupAgreement* setup) {
  const std::unique_ptr<TrainSession> session = start_training(o, world, setup);
  TrainSession& s = *session;
  // made once: a std::function built per step would allocate
  const std::function<const int32_t*(int64_t)> micro_batch = [&](int64_t a) {
    return s.micro_batch(a);
  };
  const StopSignal stop_signal;  // SIGTERM/SIGINT: finish the step, save, exit 0
  const Clock::time_point start = Clock::now();
  double last_loss = 0, best_eval = StepMetrics::kNone;
  int64_t skipped = 0, steps_done = s.first_step, best_eval_step = 0;
  bool stop = false;
  for (int64_t step = s.first_step; step < o.optim.steps && !stop; ++step) {
    const Clock::time_point t0 = Clock::now();
    const double data_wait = s.read_batch(step);
    TraceRecorder::Span step_span(s.outputs->trace(), s.outputs->step_lane(), "step", trace::kStep);
    const StepResult r = s.runner->run(step, o.data.grad_accum, micro_batch);
    step_span.end();
    const double step_s = seconds_since(t0);
    if (r.skipped) {  // non-finite loss: nothing was updated
      skip_step(s, step, r, ++skipped);
      continue;
    }
    last_loss = r.losses.loss;
    StepMetrics m =
        s.recorder->record(step, r, step_s, data_wait, seconds_since(start), s.first_step);
    const bool last = step + 1 == o.optim.steps;
    if (evaluation_due(o, step + 1)) {
      const HeldOutLoss h = evaluate_now(s);
      m.eval_loss = h.loss;
      if (std::isfinite(h.se)) m.eval_loss_se = h.se;
      if (std::isfinite(m.eval_loss) && !(m.eval_loss >= best_eval))
        best_eval = m.eval_loss, best_eval_step = step + 1;
    }
    stop = agree_on_stop(world);
    m.save_s = save_if_due(s, step + 1, last, stop);
    s.outputs->write(m, (step + 1) % o.logging.log_every == 0 || last || stop);
    steps_done = step + 1;
  }
  const std::string saved = s.checkpoints->finish();
  s.outputs->close();
  print_end(s, saved, stop, steps_done, seconds_since(start), best_eval, best_eval_step);
  return last_loss;
}

}  // namespace moet
