// The `moet train` loop: data, model, optimizer, progress lines and metrics.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace moet {

struct TrainOptions {
  std::string model_path;
  std::string data;  // "" = default English corpus, "mock", text, Megatron prefix or blend
  std::string tokenizer = "byte";        // tokenizes text data as it is read
  std::string split;                     // train,validation shares of documents ("" = 95,5)
  std::string doc_boundary = "percent";  // plain text: where documents end (documents.h)
  std::string json_key = "text";         // JSONL: the field holding a document
  int64_t prefetch = 2;                  // batches prepared ahead by a background thread (0: none)
  int64_t steps = 200;
  int64_t micro_batch = 8;
  int64_t seq = 256;
  int64_t grad_accum = 1;
  double lr = 1e-3;
  std::optional<double> min_lr;   // unset: lr / 10
  std::optional<int64_t> warmup;  // unset: min(200, steps / 10); at most steps
  bool override_opt_param_scheduler = false;  // resume under a schedule other than the run's
  std::string schedule = "cosine";
  uint64_t seed = 1234;
  int threads = 0;  // 0: all cores
  // fp32, bf16, mxfp8, fp8-blockwise, or auto: bf16 where the CPU multiplies bf16, else fp32
  // (docs/precision.md).
  std::string precision = "auto";
  int64_t bf16_layers = 1;  // FP8 recipes: first and last N decoder layers stay bf16
  std::string metrics_path;
  // Replace existing outputs (--metrics, --trace files); an existing empty file is replaced
  // without it (a run killed before its first step leaves one).
  bool overwrite = false;
  int64_t log_every = 1;
  // TensorBoard event files in this directory (rank 0; flushed every log_every steps).
  std::string tensorboard_dir;
  // Every N steps, the tokens each routed expert received, per MoE layer, into the metrics
  // file and TensorBoard (0: never).
  int64_t log_expert_load = 0;
  int64_t eval_every = 0;  // 0: evaluate only at the end
  int64_t eval_batches = 4;
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
  std::optional<double> peak_tflops;  // unset: measure the GEMM peak at start
  bool quiet = false;                 // no progress lines (metrics file only)
  int64_t ep = 1;                     // expert-parallel size (ranks per expert group)
  int64_t ep_ranks_per_node = 0;      // consecutive ranks of an EP group on one node (0: all)
  // Communication on its own thread, hidden behind compute: "on", "off", or "auto" (on when
  // the node has a core to spare for each rank's communication thread).
  std::string overlap = "auto";
  std::string trace_path;               // Perfetto/Chrome trace, one file per rank ("" = none)
  std::string dispatcher = "alltoall";  // expert token exchange with ep > 1: alltoall, allgather
  bool a2a_overlap = false;  // split micro-batches in two lanes whose all-to-alls interleave
  bool zero1 = false;        // ZeRO-1: shard the AdamW moments over the data-parallel ranks
  // Pipeline parallelism (docs/pipeline.md): stages, model chunks per stage (interleaved 1F1B
  // when > 1), and Megatron's layout string ("" = the decoder layers split evenly).
  int64_t pp = 1;
  int64_t vpp = 1;
  std::string pp_layout;
  // One sequence at a time, gradients added in a fixed tree order: data parallelism equals one
  // process with a larger micro-batch bit for bit (StepRunner::set_deterministic).
  bool deterministic = false;
  // Checkpoints (docs/checkpoints.md).
  std::string out_dir;         // run directory: checkpoints step-NNNNNNN/ and `latest`
  int64_t save_every = 0;      // steps between checkpoints (0: only at the end and on a stop)
  int64_t keep_last = 0;       // keep the newest K checkpoints (0: all)
  std::string resume;          // "auto" (--out's latest, else a fresh start), a run or step dir
  bool sync_save = false;      // write checkpoints on the training thread
  int64_t skip_nonfinite = 0;  // steps with a non-finite loss to skip before stopping
  std::string init_from;       // start from a checkpoint's weights (fresh optimizer and step 0)
  std::string command_line;    // recorded in checkpoints
};

class Communicator;
class SetupAgreement;

// Checks the options (check_train_options, check_train_layout: one clear moet::Error line per
// problem, before any output is created) and trains. world: the processes
// of an mpirun job (data parallelism, --ep expert parallelism), or null for one process.
// setup: where the ranks agree that every rank's checks passed, before the first collective
// (null: no agreement; a rank that fails its checks then leaves the others waiting).
// Returns the final loss.
double run_training(const TrainOptions& opts, Communicator* world = nullptr,
                    SetupAgreement* setup = nullptr);

}  // namespace moet
