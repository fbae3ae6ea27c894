#include "train/train_options_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "checkpoint/hf.h"
#include "core/error.h"
#include "core/flag_check.h"
#include "core/warning.h"
#include "data/dataset_tokenizer.h"
#include "data/gpt_dataset.h"
#include "model/recipe.h"
#include "model/sequence_parallel.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"
#include "train/parallelize.h"

namespace moet {

namespace {

// Each numeric flag alone.
void check_numbers(const TrainOptions& o) {
  check_flag_positive("--steps", o.optim.steps);
  check_flag_positive("--micro-batch", o.data.micro_batch);
  check_flag_at_least("--seq", o.data.seq, 2);
  check_flag_positive("--grad-accum", o.data.grad_accum);
  check_flag_positive("--lr", o.optim.lr);
  MOET_CHECK(
      !o.optim.min_lr ||
          (std::isfinite(*o.optim.min_lr) && *o.optim.min_lr >= 0 && *o.optim.min_lr <= o.optim.lr),
      "--min-lr must be a finite number in [0, --lr ", o.optim.lr, "], got ", *o.optim.min_lr);
  // A longer warm-up would end the run before the learning rate reaches --lr.
  MOET_CHECK(!o.optim.warmup || (*o.optim.warmup >= 0 && *o.optim.warmup <= o.optim.steps),
             "--warmup must be in [0, --steps ", o.optim.steps, "], got ", *o.optim.warmup);
  check_flag_at_least("--weight-decay", o.optim.weight_decay, 0);
  check_flag_at_least("--grad-clip", o.optim.grad_clip, 0);
  check_flag_at_least("--mtp-lambda", o.optim.mtp_lambda, 0);
  check_flag_at_least("--balance-alpha", o.optim.balance_alpha, 0);
  check_flag_at_least("--z-loss", o.optim.z_loss_coef, 0);
  check_flag_at_least("--bias-update-rate", o.optim.bias_update_rate, 0);
  if (o.logging.peak_tflops) check_flag_positive("--peak-tflops", *o.logging.peak_tflops);
  check_flag_threads(o.parallel.threads);
  check_flag_in_range("--prefetch", o.data.prefetch, int64_t(0), int64_t(1024));
  check_flag_at_least("--bf16-layers", o.precision.bf16_layers, 0);
  if (o.precision.bf16_layers_end)
    check_flag_at_least("--bf16-layers-end", *o.precision.bf16_layers_end, 0);
  if (o.recompute.num_layers)
    check_flag_positive("--recompute-num-layers", *o.recompute.num_layers);
  check_flag_positive("--log-every", o.logging.log_every);
  check_flag_at_least("--log-expert-load", o.logging.log_expert_load, 0);
  check_flag_at_least("--eval-every", o.logging.eval_every, 0);
  check_flag_at_least("--eval-batches", o.logging.eval_batches, 0);
  check_flag_positive("--tp", o.parallel.tp);
  check_flag_positive("--ep", o.parallel.ep);
  check_flag_at_least("--ep-ranks-per-node", o.parallel.ep_ranks_per_node, 0);
  check_flag_positive("--pp", o.parallel.pp);
  check_flag_positive("--vpp", o.parallel.vpp);
  check_flag_at_least("--save-every", o.checkpoint.save_every, 0);
  check_flag_at_least("--keep-last", o.checkpoint.keep_last, 0);
  check_flag_at_least("--skip-nonfinite", o.checkpoint.skip_nonfinite, 0);
  // A rank holds a step's token ids (with their targets) at once: 2^31 of them (8 GiB) is taken
  // for a mistake, before the product overflows.
  const double tokens =
      double(o.data.micro_batch) * double(o.data.grad_accum) * (double(o.data.seq) + 1);
  MOET_CHECK(tokens < 2147483648.0, "--micro-batch ", o.data.micro_batch, " x --grad-accum ",
             o.data.grad_accum, " x (--seq ", o.data.seq, " + 1) = ", tokens,
             " token ids per step and rank: more than 2^31");
  // The run's token count (all ranks) is a 64-bit integer; 2^53 per rank leaves room for 1024.
  MOET_CHECK(double(o.optim.steps) * tokens < 9007199254740992.0, "--steps ", o.optim.steps, " x ",
             tokens, " tokens per step and rank: more than 2^53 tokens");
}

// The flags that name one of a few choices, or text with a syntax of its own.
void check_words(const TrainOptions& o) {
  MOET_CHECK(!o.model_path.empty(), "--model CONFIG.json is required");
  if (!o.data.split.empty())
    MOET_CHECK(parse_data_split(o.data.split).train > 0, "--split '", o.data.split,
               "' gives the training split no documents");
}

// A file the run will write (if `path` is given): not a directory, in a directory that exists
// or is the run directory --out (made when the run starts).
// A file the run will write: not a directory, and its folder a folder (or missing: the run creates
// missing folders as it creates --out).
void check_output_file(const char* flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  MOET_CHECK(!fs::is_directory(path), flag, " '", path, "' is a directory; it names a file");
  for (fs::path p = fs::path(path).parent_path(); !p.empty() && p != p.root_path();
       p = p.parent_path())
    MOET_CHECK(!fs::exists(p) || fs::is_directory(p), flag, " '", path, "': '", p.string(),
               "' is not a directory");
}

// Combinations the trainer cannot run, and outputs that could not be written.
void check_combinations(const TrainOptions& o) {
  MOET_CHECK(!o.parallel.a2a_overlap || o.parallel.pp > 1 || o.data.micro_batch % 2 == 0,
             "--a2a-overlap splits each micro-batch in two: --micro-batch must be even, got ",
             o.data.micro_batch);
  // AdamW multiplies the weights by 1 - lr x weight decay at every step (as torch does).
  MOET_CHECK(o.optim.lr * o.optim.weight_decay < 1, "--weight-decay ", o.optim.weight_decay,
             " x --lr ", o.optim.lr,
             " >= 1 would zero or flip the sign of every decayed weight at each step");
  // As Megatron: the moments' dtypes are the precision-aware optimizer's settings.
  for (const auto& [flag, d] : {std::pair{"--exp-avg-dtype", o.optim.exp_avg_dtype},
                                std::pair{"--exp-avg-sq-dtype", o.optim.exp_avg_sq_dtype}})
    MOET_CHECK(d == MomentDtype::kFp32 || o.optim.use_precision_aware_optimizer, flag,
               " bf16 needs --use-precision-aware-optimizer (which lets AdamW store its moments in "
               "bf16)");
  const RecomputeOptions& r = o.recompute;
  MOET_CHECK(r.modules.empty() || r.granularity == RecomputeGranularity::kSelective,
             "--recompute-modules needs --recompute-granularity selective");
  MOET_CHECK((!r.method && !r.num_layers) || r.granularity == RecomputeGranularity::kFull,
             "--recompute-method and --recompute-num-layers need --recompute-granularity full");
  MOET_CHECK(!o.parallel.deterministic || !o.parallel.a2a_overlap,
             "--deterministic runs one sequence at a time and does not combine with --a2a-overlap");
  MOET_CHECK(o.logging.log_expert_load == 0 || o.parallel.pp == 1,
             "--log-expert-load does not combine with --pp yet (each stage holds other layers)");
  MOET_CHECK(o.parallel.pp > 1 || (o.parallel.vpp == 1 && o.parallel.pp_layout.empty()),
             "--vpp and --pp-layout need --pp > 1");
  MOET_CHECK(
      o.parallel.pp > 1 || o.parallel.pipeline_schedule == PipelineScheduleKind::kInterleaved,
      "--pipeline-schedule needs --pp > 1");
  MOET_CHECK(
      !o.parallel.delay_wgrad_compute ||
          (o.parallel.pp > 1 && (o.parallel.a2a_overlap ||
                                 o.parallel.pipeline_schedule == PipelineScheduleKind::kDualPipeV)),
      "--delay-wgrad-compute delays the weight gradients of a combined pass: it needs "
      "--a2a-overlap under --pp, or --pipeline-schedule dualpipev");
  MOET_CHECK(o.parallel.pp == 1 || o.checkpoint.init_from.empty() ||
                 !is_hf_directory(o.checkpoint.init_from),
             "--pp cannot start from a Hugging Face directory yet: convert it with moet "
             "import-hf and pass that checkpoint to --init-from");
  MOET_CHECK(!o.checkpoint.out_dir.empty() ||
                 (o.checkpoint.save_every == 0 && o.checkpoint.keep_last == 0),
             "--save-every and --keep-last need --out RUN_DIR (where checkpoints go)");
  MOET_CHECK(!o.checkpoint.out_dir.empty() || o.checkpoint.resume != "auto",
             "--resume auto looks for checkpoints in --out RUN_DIR: give --out");
  MOET_CHECK(o.checkpoint.resume.empty() || o.checkpoint.init_from.empty(),
             "--resume and --init-from exclude each other (resume continues a run; init-from "
             "starts a new one from a model's weights)");
  namespace fs = std::filesystem;
  MOET_CHECK(o.checkpoint.out_dir.empty() || !fs::exists(o.checkpoint.out_dir) ||
                 fs::is_directory(o.checkpoint.out_dir),
             "--out '", o.checkpoint.out_dir, "' exists and is not a directory");
  MOET_CHECK(o.logging.tensorboard_dir.empty() || !fs::exists(o.logging.tensorboard_dir) ||
                 fs::is_directory(o.logging.tensorboard_dir),
             "--tensorboard '", o.logging.tensorboard_dir, "' exists and is not a directory");
  check_output_file("--metrics", o.logging.metrics_path);
  check_output_file("--trace", o.logging.trace_path);
}

}  // namespace

void check_train_options(const TrainOptions& o) {
  check_words(o);
  check_numbers(o);
  check_combinations(o);
}

void check_train_layout(const TrainOptions& o, const ModelConfig& cfg, const Communicator* world) {
  MOET_CHECK(o.parallel.ep == 1 || world, "--ep ", o.parallel.ep,
             " needs several processes: start moet with mpirun -np N (N divisible by --ep)");
  MOET_CHECK(o.parallel.pp == 1 || world, "--pp ", o.parallel.pp,
             " needs several processes: start moet with mpirun -np N (N divisible by --pp)");
  MOET_CHECK(!o.parallel.zero1 || world,
             "--zero1 shards over data-parallel ranks: start moet with mpirun -np N");
  MOET_CHECK(o.parallel.tp == 1 || world, "--tp ", o.parallel.tp,
             " needs several processes: start moet with mpirun -np N (N divisible by --tp)");
  const int64_t W = world ? world->size() : 1;
  MOET_CHECK(W % o.parallel.pp == 0, "--pp ", o.parallel.pp, " does not divide the ", W, " ranks");
  MOET_CHECK(W % (o.parallel.pp * o.parallel.tp) == 0, "--tp ", o.parallel.tp, " --pp ",
             o.parallel.pp, " do not divide the ", W, " ranks: run a multiple of ",
             o.parallel.pp * o.parallel.tp, " ranks");
  if (o.parallel.tp > 1) {
    // what tensor parallelism runs with today (docs/parallel.md, "Tensor parallelism")
    MOET_CHECK(cfg.num_moe_layers() == 0, "--tp ", o.parallel.tp,
               ": the model has MoE layers, whose routed experts under TP need sequence "
               "parallelism's token split, not built yet: run --tp 1 with --ep, or a dense model");
    MOET_CHECK(!o.parallel.deterministic || tp_invariant_sums_possible(cfg), "--tp ", o.parallel.tp,
               " --deterministic: the model's heads, FFN and vocabulary must "
               "divide into ",
               TensorParallel::kPieces, " pieces: run without --deterministic");
  }
  if (o.parallel.sequence_parallel) {
    MOET_CHECK(o.parallel.tp > 1,
               "--sequence-parallel splits tokens over the tensor-parallel "
               "ranks: add --tp 2 (or more), or drop --sequence-parallel");
    MOET_CHECK(o.data.seq % o.parallel.tp == 0, "--sequence-parallel: --seq ", o.data.seq,
               " does not divide over --tp ", o.parallel.tp,
               ": choose a --seq that is a multiple of ", o.parallel.tp);
    MOET_CHECK(!o.parallel.deterministic ||
                   (o.data.seq % kTokenPieces == 0 && kTokenPieces % o.parallel.tp == 0),
               "--sequence-parallel --deterministic sums over tokens in ", kTokenPieces,
               " pieces per sequence: --seq must be a multiple of ", kTokenPieces,
               " and --tp one of 2, 4, 8");
  }
  const int64_t stage = W / (o.parallel.pp * o.parallel.tp);  // a stage's data-parallel ranks
  MOET_CHECK(stage % o.parallel.ep == 0, "--ep ", o.parallel.ep, " does not divide the ", stage,
             " ranks", o.parallel.pp > 1 ? " of a pipeline stage" : "");
  MOET_CHECK(o.parallel.ep_ranks_per_node == 0 || o.parallel.ep % o.parallel.ep_ranks_per_node == 0,
             "--ep-ranks-per-node ", o.parallel.ep_ranks_per_node, " must divide --ep ",
             o.parallel.ep);
  MOET_CHECK(
      o.parallel.ep == 1 || cfg.num_moe_layers() == 0 || cfg.n_routed_experts % o.parallel.ep == 0,
      "--ep ", o.parallel.ep, " does not divide the model's ", cfg.n_routed_experts,
      " routed experts");
  MOET_CHECK(o.data.seq <= cfg.max_position_embeddings, "--seq ", o.data.seq,
             " exceeds the model's max_position_embeddings (", cfg.max_position_embeddings,
             "): the largest valid --seq is ", cfg.max_position_embeddings);
  if (o.parallel.pp == 1) return;
  MOET_CHECK(!cfg.tie_word_embeddings,
             "--pp does not support tie_word_embeddings: the loss stage would train a copy of the "
             "embedding");
  PipelineScheduleSpec spec;  // as parallelize() builds it
  spec.stages = o.parallel.pp;
  spec.chunks = o.parallel.chunks();
  spec.microbatches =
      o.parallel.deterministic ? o.data.grad_accum * o.data.micro_batch : o.data.grad_accum;
  spec.ep_overlap = o.parallel.a2a_overlap;
  spec.kind = o.parallel.pipeline_schedule;
  check_pipeline_schedule(spec);
  pipeline_parts(cfg, o.parallel.pp_layout, o.parallel.pp * o.parallel.chunks());
  // A bubble as long as the work is legal but rarely meant: say what brings it to a quarter.
  const int64_t P = spec.stages, V = spec.chunks, M = spec.microbatches;
  const double bubble = double(P - 1) / double(V * M);
  auto three = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", x);
    return std::string(b);
  };
  if (bubble >= 1.0) {
    const int64_t per_accum =
        o.parallel.deterministic ? o.data.micro_batch : 1;  // micro-batches per --grad-accum
    const int64_t want_m = (4 * (P - 1) + V - 1) / V;       // (P-1)/(V*M) <= 0.25
    const int64_t accum = (want_m + per_accum - 1) / per_accum;
    warn(str("the pipeline bubble (P-1)/(V*M) = (", P, "-1)/(", V, "*", M, ") = ", three(bubble),
             ": each stage waits at least as long as it computes; --grad-accum ", accum,
             " brings it to ", three(double(P - 1) / double(V * accum * per_accum))));
  }
}

bool fit_default_seq_to_model(TrainOptions& o) {
  int64_t max_positions = 0;
  try {
    max_positions = load_model_config(o.model_path).max_position_embeddings;
  } catch (const std::exception&) {
    return false;  // the run's own checks report the config
  }
  if (max_positions <= 0 || o.data.seq <= max_positions) return false;
  o.data.seq = max_positions;
  return true;
}

void apply_run_directory_defaults(TrainOptions& o, bool tensorboard_asked) {
  namespace fs = std::filesystem;
  if (tensorboard_asked && o.logging.tensorboard_dir.empty()) {
    MOET_CHECK(!o.checkpoint.out_dir.empty(),
               "--tensorboard without a directory writes into the run directory: give --out RUN "
               "(or --tensorboard DIR)");
    o.logging.tensorboard_dir = (fs::path(o.checkpoint.out_dir) / "tensorboard").string();
  }
  if (!o.checkpoint.out_dir.empty() && o.logging.metrics_path.empty())
    o.logging.metrics_path = (fs::path(o.checkpoint.out_dir) / "metrics.jsonl").string();
}

void resolve_train_tokenizer(TrainOptions& o) {
  o.data.tokenizer = resolve_data_tokenizer(o.data.tokenizer, o.data.spec, "", "moet train");
}

bool output_absent_or_empty(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return true;
  return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0 &&
         !ec;
}

LrSchedule train_lr_schedule(const TrainOptions& o) {
  LrSchedule s;
  s.kind = o.optim.schedule;
  s.max_lr = o.optim.lr;
  s.min_lr = o.optim.min_lr ? *o.optim.min_lr : o.optim.lr / 10;
  s.warmup = o.optim.warmup ? *o.optim.warmup : std::min<int64_t>(200, o.optim.steps / 10);
  s.total = o.optim.steps;
  return s;
}

}  // namespace moet
