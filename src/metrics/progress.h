// Per-step training metrics: a compact progress line for the terminal and a JSONL writer
// (one JSON object per step, flushed as written). Every field is explained in docs/metrics.md
// (the glossary); keep it true when a field changes.
#pragma once
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace moet {

// Fields left NaN are "not measured this step": the progress line leaves them out, the JSONL
// record leaves optional ones out and writes null for required ones.
struct StepMetrics {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

  int64_t step = 0;             // steps done (1-based: the step that just finished)
  int64_t total_steps = 0;      // 0 when unknown
  double loss = kNone;          // total training loss (what is optimised)
  double lm_loss = kNone;       // next-token cross-entropy
  double mtp_loss = kNone;      // multi-token-prediction loss (mean over modules, unweighted)
  double balance_loss = kNone;  // sequence-wise balance loss (unweighted sum over MoE layers)
  double z_loss = kNone;        // router z-loss (unweighted)
  double eval_loss = kNone;     // held-out lm loss, when evaluated this step
  double eval_loss_se = kNone;  // its standard error over the evaluated batches
  double lr = kNone;
  double grad_norm = kNone;        // global norm before clipping
  double tokens_per_s = kNone;     // the global batch's tokens / step_time_s
  double tflops = kNone;           // model TFLOP/s (Megatron's formula) per device (rank)
  double mfu = kNone;              // fraction (0..1) of the device peak
  double max_expert_load = kNone;  // max over experts of load / mean load (1 = balanced)
  int64_t tokens = 0;              // tokens trained on so far
  double step_time_s = kNone;
  double data_wait_s = kNone;  // seconds the step waited for its batch (0 when data keep up)
  // Communication (under mpirun): seconds in the expert all-to-alls (dispatch + combine, forward
  // and backward), communication time not hidden behind compute, gradient reduction seconds,
  // and bytes this rank sent to other ranks: comm_bytes is all of it (the expert exchanges'
  // payload + grad_sync_bytes), grad_sync_bytes the gradient reductions' (and ZeRO-1's
  // parameter all-gather's) part (DataParallel::take_sync_bytes).
  double a2a_s = kNone;
  double exposed_comm_s = kNone;
  double ep_load_imbalance = kNone;  // Σ layers max over EP ranks of expert rows / Σ mean
  double a2a_exposed_s = kNone;      // the all-to-all part of exposed_comm_s
  double grad_sync_s = kNone;
  double comm_bytes = kNone;
  double grad_sync_bytes = kNone;
  double comm_bytes_other_nodes = kNone;  // the part of comm_bytes that left the node
  double elapsed_s = kNone;
  double eta_s = kNone;
  double peak_rss_mb = kNone;  // the process's peak resident set size so far (MB)
  double save_s = kNone;       // seconds a checkpoint save held up this step (async: the copy)
  // --pp: the pipeline's passes took pp_run_s (the slowest rank), of which the busiest rank
  // computed for busy: pp_bubble = pp_run_s / busy − 1. pp_schedule_s is what the schedule
  // (simulate_pipeline, the generator `moet simulate` uses) predicts from this step's measured
  // pass times of every virtual stage.
  double pp_run_s = kNone;
  double pp_bubble = kNone;
  // --pp: bytes every rank together sent between pipeline stages this step (activations, their
  // gradients, MTP gradients, the embedding replica); rank 0's part is in comm_bytes.
  double pp_bytes = kNone;
  double pp_schedule_s = kNone;
  // World size: the progress line labels rates global (tok/s) or per rank (TFLOP/s) when > 1.
  int ranks = 1;
  // Means over the logging interval (--log-every > 1, at the steps that print a line; see
  // IntervalMeans): how many steps, the mean losses and step time, and the rates over the
  // interval (its tokens, FLOPs / its seconds). interval_steps 0: none.
  int64_t interval_steps = 0;
  double interval_loss = kNone;
  double interval_lm_loss = kNone;
  double interval_mtp_loss = kNone;
  double interval_step_time_s = kNone;
  double interval_tokens_per_s = kNone;
  double interval_tflops = kNone;
  double interval_mfu = kNone;
  // --log-expert-load, on its steps: the (token, expert) assignments each routed expert received
  // this step (all micro-batches, all ranks), one row per MoE layer, and each row's decoder
  // layer index (Hugging Face numbering: MTP layers follow the main ones). Empty otherwise.
  std::vector<int64_t> expert_load_layers;
  std::vector<std::vector<int64_t>> expert_load;
  // ... and each routed expert's e_score_correction_bias after the step's update (what a
  // checkpoint of this step holds), one row per MoE layer as expert_load. Empty otherwise.
  std::vector<std::vector<float>> expert_bias;
  // Every step: each MoE layer's sequence-wise balance loss (unweighted; the mean over the step's
  // sequences and ranks, adding up to balance_loss) and the layers' decoder indices (as
  // expert_load_layers). Empty when the model has no MoE layer.
  std::vector<int64_t> balance_loss_layers;
  std::vector<double> balance_loss_per_layer;
};

// max(load) / mean(load) of one layer (1 = balanced; NaN when the layer received nothing).
double expert_load_imbalance(const std::vector<int64_t>& load_E);

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
// The JSON object of one step, one line without a newline.
std::string metrics_json_line(const StepMetrics& m);

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
