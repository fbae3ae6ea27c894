#include "cli/train_commands.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/choice_option.h"
#include "cli/flag_validators.h"
#include "cli/text_format_options.h"

namespace moet::cli {

CLI::App* add_train_command(CLI::App& app, TrainOptions& o) {
  CLI::App* t = app.add_subcommand("train", "train a DeepSeek-V3-style MoE model on the CPU");
  // A flag given twice takes the last value (scripts add defaults, users override them).
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  t->add_option("--model", o.model_path, "Hugging Face config.json of the model")->required();
  // read by main() before the flags (cli/config_file.h); declared here for --help
  static std::string config_file;
  t->add_option("--config", config_file,
                "a FILE.yaml or FILE.json of train's flags (\"micro-batch: 4\"), read first: "
                "flags on the command line override it; run.json keeps it");
  t->add_option("--data", o.data.spec,
                "training text file or directory, a Megatron PREFIX (PREFIX.bin/.idx, e.g. from "
                "moet data prepare), a blend \"0.7 PREFIX_A 0.3 PREFIX_B\", or 'mock' for random "
                "tokens (default: the English corpus of Debian's fortunes package)");
  t->add_option("--tokenizer", o.data.tokenizer,
                "tokenizer of text data: 'byte' (the default) or a Hugging Face tokenizer.json; "
                "Megatron data use the one moet data prepare recorded beside them (a --tokenizer "
                "given must be that one). Kept in --out as tokenizer.json, where moet generate, "
                "eval and export-hf find it");
  t->add_option("--split", o.data.split,
                "train,validation[,test] shares of the documents (default 95,5; the validation "
                "part is held out for evaluation)");
  cli::add_text_format_options(t, o.data.doc_boundary, o.data.json_key);
  t->add_option("--prefetch", o.data.prefetch,
                "steps of batches a background thread prepares ahead (0: on the training thread)")
      ->capture_default_str();
  t->add_option("--steps", o.optim.steps, "optimizer steps")->capture_default_str();
  t->add_option("--micro-batch", o.data.micro_batch, "sequences per micro-batch")
      ->capture_default_str();
  t->add_option("--seq", o.data.seq,
                "sequence length (default 256, or the model's max_position_embeddings when "
                "that is less)")
      ->capture_default_str();
  t->add_option("--grad-accum", o.data.grad_accum, "micro-batches per step")->capture_default_str();
  t->add_option("--lr", o.optim.lr, "peak learning rate")->capture_default_str();
  t->add_option("--min-lr", o.optim.min_lr,
                "final learning rate of the cosine, in [0, lr] (default lr/10)");
  t->add_option("--warmup", o.optim.warmup,
                "warm-up steps, at most --steps (default min(200, steps/10))");
  add_choice_option(t, "--schedule", o.optim.schedule, schedule_choices(), "cosine or constant");
  t->add_flag("--override-opt-param-scheduler", o.optim.override_opt_param_scheduler,
              "resume under a learning-rate schedule (--lr, --min-lr, --warmup, --steps, "
              "--schedule) other than the checkpoint's (as Megatron's flag; refused otherwise)");
  t->add_option("--seed", o.data.seed,
                "seed of the initialisation, and of the data order unless --data-seed is given")
      ->check(cli::unsigned_integer())
      ->capture_default_str();
  t->add_option("--data-seed", o.data.data_seed,
                "seed of the data order alone (which samples, in which order; the held-out data "
                "never depend on it): runs that differ only in it measure data noise")
      ->check(cli::unsigned_integer());
  t->add_option("--threads", o.parallel.threads, "threads (default: all cores)");
  add_choice_option(t, "--precision", o.precision.recipe, precision_choices(),
                    "fp32, bf16, mxfp8, fp8-blockwise, or auto (bf16 where the CPU multiplies "
                    "bf16, else fp32)");
  t->add_option("--bf16-layers", o.precision.bf16_layers,
                "FP8 recipes: the first and the last N decoder layers run in bf16")
      ->capture_default_str();
  add_choice_option(t, "--recompute-granularity", o.recompute.granularity,
                    recompute_granularity_choices(),
                    "activation recomputation (as Megatron's): selective (the modules of "
                    "--recompute-modules) or full (whole decoder layers, --recompute-method); "
                    "bit for bit what none trains (docs/training.md, Memory)");
  add_choices_option(t, "--recompute-modules", o.recompute.modules, recompute_module_choices(),
                     "with --recompute-granularity selective: core_attn, mla_up_proj, moe_act, "
                     "layernorm, mlp, moe, shared_experts (default core_attn)");
  add_choice_option(t, "--recompute-method", o.recompute.method,
                    optional_choices(recompute_method_choices()),
                    "with --recompute-granularity full: uniform (every layer, in groups of "
                    "--recompute-num-layers) or block (the first --recompute-num-layers layers of "
                    "each pipeline chunk); default uniform");
  t->add_option("--recompute-num-layers", o.recompute.num_layers,
                "with --recompute-granularity full: layers per group (uniform) or recomputed "
                "layers per chunk (block); default 1");
  t->add_option("--metrics", o.logging.metrics_path,
                "write one JSON object per step to this file (default with --out RUN: "
                "RUN/metrics.jsonl)");
  t->add_flag("--overwrite,--overwrite-metrics", o.logging.overwrite,
              "replace existing --metrics and --trace files (an empty one is replaced anyway)");
  t->add_option("--tensorboard", o.logging.tensorboard_dir,
                "write TensorBoard event files into this directory (tags as Megatron's; "
                "docs/metrics.md); without one, into RUN/tensorboard of --out RUN")
      ->expected(0, 1);
  t->add_option("--log-expert-load", o.logging.log_expert_load,
                "every N steps, the tokens each routed expert received per MoE layer, into "
                "--metrics and --tensorboard (0: never)")
      ->capture_default_str();
  t->add_option("--log-every", o.logging.log_every, "steps between progress lines")
      ->capture_default_str();
  t->add_option("--eval-every", o.logging.eval_every,
                "steps between held-out evaluations (0: at the end)");
  t->add_option("--eval-batches", o.logging.eval_batches, "held-out micro-batches per evaluation")
      ->capture_default_str();
  t->add_option("--weight-decay", o.optim.weight_decay, "AdamW weight decay")
      ->capture_default_str();
  t->add_option("--grad-clip", o.optim.grad_clip, "global gradient-norm clip (0: off)")
      ->capture_default_str();
  t->add_option("--mtp-lambda", o.optim.mtp_lambda, "MTP loss weight")->capture_default_str();
  t->add_option("--balance-alpha", o.optim.balance_alpha, "sequence-wise balance loss weight")
      ->capture_default_str();
  t->add_option("--z-loss", o.optim.z_loss_coef, "router z-loss weight")->capture_default_str();
  t->add_option("--bias-update-rate", o.optim.bias_update_rate,
                "aux-loss-free expert bias update rate gamma (DeepSeek-V3: 0.001; "
                "docs/training.md)")
      ->capture_default_str();
  t->add_option("--peak-tflops", o.logging.peak_tflops,
                "peak TFLOP/s that MFU divides by, positive (default: the measured GEMM peak)");
  t->add_flag("--quiet", o.logging.quiet, "no progress lines");
  t->add_option("--ep", o.parallel.ep,
                "expert-parallel size: ranks per expert group (under mpirun)")
      ->capture_default_str();
  t->add_flag("--a2a-overlap", o.parallel.a2a_overlap,
              "split each micro-batch in two halves whose stages interleave, so one half's "
              "all-to-alls travel under the other half's compute; under --pp, combined 1F1B: "
              "a forward and another micro-batch's backward interleave");
  t->add_option("--pp", o.parallel.pp,
                "pipeline stages (under mpirun; the world is pp x data-parallel ranks, the "
                "pipeline outermost as in Megatron)")
      ->capture_default_str();
  t->add_option("--vpp", o.parallel.vpp,
                "model chunks (virtual stages) per pipeline stage: interleaved 1F1B when > 1")
      ->capture_default_str();
  t->add_option("--pp-layout", o.parallel.pp_layout,
                "Megatron's pipeline layout, e.g. \"Et*2|t*2|t*2|t*2mL\" (default: the decoder "
                "layers split evenly over pp x vpp stages)");
  t->add_flag("--zero1", o.parallel.zero1,
              "ZeRO-1: shard the AdamW moments over the data-parallel ranks (bitwise the same "
              "training)");
  t->add_flag("--deterministic", o.parallel.deterministic,
              "one sequence at a time, gradients added in a fixed tree order: N data-parallel "
              "ranks give bit for bit what one process gives with an N-times larger micro-batch");
  t->add_option("--ep-ranks-per-node", o.parallel.ep_ranks_per_node,
                "ranks of an expert-parallel group that share a node (for bytes across nodes; "
                "n_group = nodes makes routing node-limited)");
  t->add_option("--trace", o.logging.trace_path,
                "write a Perfetto/Chrome trace (compute and comm lanes), FILE.rankN.json per rank");
  add_choice_option(t, "--dispatcher", o.parallel.dispatcher, dispatcher_choices(),
                    "expert token exchange with --ep > 1: alltoall or allgather");
  t->add_option("--out", o.checkpoint.out_dir,
                "run directory for checkpoints (step-NNNNNNN/ and a 'latest' pointer); a run "
                "with --out saves at the end and on SIGTERM/SIGINT");
  t->add_option("--save-every", o.checkpoint.save_every,
                "steps between checkpoints (0: only at the end)")
      ->capture_default_str();
  t->add_option("--keep-last", o.checkpoint.keep_last,
                "keep only the newest K checkpoints (0: all)")
      ->capture_default_str();
  t->add_option("--resume", o.checkpoint.resume,
                "'auto' (the latest checkpoint in --out, or a fresh start), a run directory (its "
                "latest checkpoint) or a step-NNNNNNN directory");
  t->add_flag("--sync-save", o.checkpoint.sync_save,
              "write checkpoints on the training thread (default: in the background)");
  t->add_option("--skip-nonfinite", o.checkpoint.skip_nonfinite,
                "skip up to N steps whose loss is NaN or Inf (default 0: stop at the first)")
      ->capture_default_str();
  t->add_option("--init-from", o.checkpoint.init_from,
                "start from the weights of a checkpoint or a Hugging Face directory (fresh "
                "optimizer, step 0)");
  add_choice_option(t, "--overlap", o.parallel.overlap, overlap_choices(),
                    "run the all-to-alls and gradient reductions on a communication thread behind "
                    "compute: auto (when a core is free for it), on, off");
  return t;
}

}  // namespace moet::cli
