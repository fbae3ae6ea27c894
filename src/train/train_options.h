// The options of `moet train`, grouped by what they configure, with each choice among a few
// words an enum parsed once at the command line (cli/train_commands.cpp binds the flags). The
// trainer never compares option strings. to_json writes them all, for run.json and
// checkpoint.json alike; check_train_options (train_options_check.h) checks them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/documents.h"
#include "model/recipe.h"
#include "model/recompute.h"
#include "optim/lr_schedule.h"
#include "parallel/pipeline_schedule.h"

namespace moet {

// --overlap: the collectives on a communication thread behind compute.
enum class OverlapMode { kAuto, kOn, kOff };
// --dispatcher: how tokens reach their experts across --ep ranks.
enum class DispatcherKind { kAllToAll, kAllGather };
// --exp-avg-dtype, --exp-avg-sq-dtype: how AdamW stores a moment.
enum class MomentDtype { kFp32, kBf16 };
struct MomentDtypes;  // optim/adamw.h

// What is read and how it is batched.
struct DataOptions {
  std::string spec;  // --data: "" = default English corpus, "mock", text, prefix, blend
  // --tokenizer: "" (not given: the data's own, else bytes), "byte" or a tokenizer.json; after
  // resolve_train_tokenizer, the one the run reads text with and keeps in --out
  std::string tokenizer;
  std::string split = "95,5";                        // train,validation[,test] shares of documents
  DocBoundary doc_boundary = DocBoundary::kPercent;  // plain text: where documents end
  std::string json_key = "text";                     // JSONL: the field holding a document
  int64_t prefetch = 2;  // batches prepared ahead by a background thread (0: none)
  int64_t micro_batch = 8;
  int64_t seq = 256;
  int64_t grad_accum = 1;
  uint64_t seed = 1234;               // initialisation, and the data order unless data_seed is set
  std::optional<uint64_t> data_seed;  // --data-seed: the data order apart from the initialisation
  // The seed of the data order (which samples, in which order; held-out data never depend on it).
  uint64_t order_seed() const { return data_seed.value_or(seed); }
};

// The schedule, the optimizer and the loss's weights.
struct OptimizerOptions {
  int64_t steps = 200;
  double lr = 1e-3;
  std::optional<double> min_lr;   // unset: lr / 10
  std::optional<int64_t> warmup;  // unset: min(200, steps / 10); at most steps
  LrSchedule::Kind schedule = LrSchedule::Kind::Cosine;
  bool override_opt_param_scheduler = false;  // resume under a schedule other than the run's
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double mtp_lambda = 0.3;
  double balance_alpha = 1e-4;
  double z_loss_coef = 0.0;
  // Aux-loss-free bias update rate γ. DeepSeek-V3 used 0.001 over thousands of steps at lr
  // 2.2e-4; at the short, hot runs this engine starts with (the quick start: 300 steps at lr
  // 1e-3) that leaves the routing collapsed, and 0.01 balances it within ~80 steps
  // (docs/training.md, "Expert balance").
  double bias_update_rate = 1e-2;
  // The precision-aware optimizer (Megatron's --use-precision-aware-optimizer): AdamW's first
  // and second moments each stored in bf16 or fp32, the update computed in fp32
  // (docs/training.md, "The precision-aware optimizer").
  bool use_precision_aware_optimizer = false;
  MomentDtype exp_avg_dtype = MomentDtype::kFp32;
  MomentDtype exp_avg_sq_dtype = MomentDtype::kFp32;
};
// How AdamW stores its moments under these options.
MomentDtypes moment_dtypes(const OptimizerOptions& o);

// The recipe (docs/precision.md).
struct PrecisionOptions {
  // unset: --precision auto, the faster recipe on this CPU (measure/recipe_choice.h)
  std::optional<Recipe> recipe;
  int64_t bf16_layers = 1;  // FP8 and FP4 recipes: the first N decoder layers stay bf16
  // and the last N (unset: as many as bf16_layers)
  std::optional<int64_t> bf16_layers_end;
  int64_t bf16_end() const { return bf16_layers_end.value_or(bf16_layers); }
  // "auto" or the recipe's name, as --precision takes it.
  std::string name() const;
};

// The parallel layout (docs/parallel.md, docs/pipeline.md) and the threads.
struct ParallelOptions {
  int threads = 0;  // compute threads per rank (0: the cores / ranks)
  int64_t tp = 1;   // tensor-parallel size (model/tensor_parallel.h)
  bool sequence_parallel =
      false;                      // the residual stream in token shards (model/sequence_parallel.h)
  int64_t ep = 1;                 // expert-parallel size (ranks per expert group)
  int64_t ep_ranks_per_node = 0;  // consecutive ranks of an EP group on one node (0: all)
  OverlapMode overlap = OverlapMode::kAuto;
  DispatcherKind dispatcher = DispatcherKind::kAllToAll;
  bool a2a_overlap = false;  // split micro-batches in two lanes whose all-to-alls interleave
  bool zero1 = false;        // ZeRO-1: shard the AdamW moments over the data-parallel ranks
  // Pipeline: stages, model chunks per stage (interleaved 1F1B when > 1), and Megatron's layout
  // string ("" = the decoder layers split evenly).
  int64_t pp = 1;
  int64_t vpp = 1;
  std::string pp_layout;
  // The pipeline schedule (parallel/pipeline_schedule.h): interleaved 1F1B by default (1F1B
  // when vpp = 1); zb1p, zbv and dualpipev run backwards as input and weight gradients apart,
  // the last two with two chunks per rank in a V.
  PipelineScheduleKind pipeline_schedule = PipelineScheduleKind::kInterleaved;
  // Megatron's --delay-wgrad-compute: a combined pass (combined 1F1B, DualPipeV's F&B pairs)
  // runs each backward stage's weight gradients after the stage's input gradients, while the
  // expert exchange the stage started is in flight.
  bool delay_wgrad_compute = false;
  // Model chunks per stage as the schedule runs them: --vpp, or the V's two when left out.
  int64_t chunks() const { return is_v_schedule(pipeline_schedule) && vpp == 1 ? 2 : vpp; }
  // One sequence at a time, gradients added in a fixed tree order: data parallelism equals one
  // process with a larger micro-batch bit for bit.
  bool deterministic = false;
};

// Activation recomputation (docs/training.md "Memory"), with Megatron's flags and meanings.
struct RecomputeOptions {
  RecomputeGranularity granularity = RecomputeGranularity::kNone;
  std::vector<RecomputeModule> modules;   // selective; none given: core_attn (Megatron's default)
  std::optional<RecomputeMethod> method;  // full; unset: uniform
  std::optional<int64_t> num_layers;      // full; unset: 1
  // What the models plan: the defaults filled in.
  RecomputePlan plan() const;
};

// Checkpoints (docs/checkpoints.md).
struct CheckpointOptions {
  std::string out_dir;         // run directory: checkpoints step-NNNNNNN/ and `latest`
  int64_t save_every = 0;      // steps between checkpoints (0: only at the end and on a stop)
  int64_t keep_last = 0;       // keep the newest K checkpoints (0: all)
  std::string resume;          // "auto" (--out's latest, else a fresh start), a run or step dir
  bool sync_save = false;      // write checkpoints on the training thread
  int64_t skip_nonfinite = 0;  // steps with a non-finite loss to skip before stopping
  std::string init_from;       // start from a checkpoint's weights (fresh optimizer and step 0)
};

// What the run reports: progress, metrics, TensorBoard, trace, held-out evaluation, MFU.
struct LoggingOptions {
  std::string metrics_path;
  // Replace existing outputs (--metrics, --trace files); an existing empty file is replaced
  // without it (a run killed before its first step leaves one).
  bool overwrite = false;
  int64_t log_every = 1;
  std::string tensorboard_dir;  // TensorBoard event files (rank 0; flushed every log_every)
  // Every N steps, the tokens each routed expert received, per MoE layer (0: never).
  int64_t log_expert_load = 0;
  int64_t eval_every = 0;  // 0: evaluate only at the end
  int64_t eval_batches = 4;
  std::optional<double> peak_tflops;  // unset: measure the GEMM peak at start
  bool quiet = false;                 // no progress lines (metrics file only)
  std::string trace_path;             // Perfetto/Chrome trace, one file per rank ("" = none)
};

struct TrainOptions {
  std::string model_path;  // --model CONFIG.json
  DataOptions data;
  OptimizerOptions optim;
  PrecisionOptions precision;
  ParallelOptions parallel;
  RecomputeOptions recompute;
  CheckpointOptions checkpoint;
  LoggingOptions logging;
  std::string command_line;  // recorded in run.json and checkpoints (--config's flags written out)
  std::string config_file;   // --config FILE ("" = none); run.json keeps its text
};

// The words of each choice and what they mean, for the command line and to_json.
const std::vector<std::pair<std::string, OverlapMode>>& overlap_choices();
const std::vector<std::pair<std::string, DispatcherKind>>& dispatcher_choices();
const std::vector<std::pair<std::string, LrSchedule::Kind>>& schedule_choices();
const std::vector<std::pair<std::string, MomentDtype>>& moment_dtype_choices();
// --precision: "auto" (unset: resolved for this CPU) or a recipe's name.
const std::vector<std::pair<std::string, std::optional<Recipe>>>& precision_choices();
const char* overlap_name(OverlapMode m);
const char* dispatcher_name(DispatcherKind d);
const char* schedule_name(LrSchedule::Kind k);

// Every option, grouped as above ({"data": {...}, "optim": {...}, ...}): run.json's "options"
// and checkpoint.json's run.options.
nlohmann::json to_json(const TrainOptions& o);
// The options to_json wrote, read back (what `moet eval --checkpoint` and a resumed run take
// from checkpoint.json). A key it does not hold keeps its default; a value of the wrong type or
// an unknown choice is one moet::Error line naming `where` and the key.
TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace moet
