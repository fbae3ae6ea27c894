// moet command-line entry point: argument parsing only; the work is in the library.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_commands.h"
#include "cli/checkpoint_commands.h"
#include "cli/config_commands.h"
#include "cli/data_commands.h"
#include "cli/eval_commands.h"
#include "cli/flag_validators.h"
#include "cli/generate_commands.h"
#include "cli/hf_commands.h"
#include "cli/report_commands.h"
#include "cli/sim_commands.h"
#include "cli/suggest.h"
#include "cli/text_format_options.h"
#include "cli/tokenizer_commands.h"
#include "core/error.h"
#include "core/warning.h"
#include "parallel/mpi_communicator.h"
#include "train/setup_agreement.h"
#include "train/train_options_check.h"
#include "train/trainer.h"

namespace {

void add_train_command(CLI::App& app, moet::TrainOptions& o) {
  CLI::App* t = app.add_subcommand("train", "train a DeepSeek-V3-style MoE model on the CPU");
  // A flag given twice takes the last value (scripts add defaults, users override them).
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  t->add_option("--model", o.model_path, "Hugging Face config.json of the model")->required();
  t->add_option("--data", o.data,
                "training text file or directory, a Megatron PREFIX (PREFIX.bin/.idx, e.g. from "
                "moet data prepare), a blend \"0.7 PREFIX_A 0.3 PREFIX_B\", or 'mock' for random "
                "tokens (default: the English corpus of Debian's fortunes package)");
  t->add_option("--tokenizer", o.tokenizer,
                "tokenizer of text data: 'byte' or a Hugging Face tokenizer.json (kept in --out as "
                "tokenizer.json, where moet generate and moet eval find it)")
      ->capture_default_str();
  t->add_option("--split", o.split,
                "train,validation[,test] shares of the documents (default 95,5; the validation "
                "part is held out for evaluation)");
  moet::cli::add_text_format_options(t, o.doc_boundary, o.json_key);
  t->add_option("--prefetch", o.prefetch,
                "steps of batches a background thread prepares ahead (0: on the training thread)")
      ->capture_default_str();
  t->add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  t->add_option("--micro-batch", o.micro_batch, "sequences per micro-batch")->capture_default_str();
  t->add_option("--seq", o.seq,
                "sequence length (default 256, or the model's max_position_embeddings when "
                "that is less)")
      ->capture_default_str();
  t->add_option("--grad-accum", o.grad_accum, "micro-batches per step")->capture_default_str();
  t->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  t->add_option("--min-lr", o.min_lr,
                "final learning rate of the cosine, in [0, lr] (default lr/10)");
  t->add_option("--warmup", o.warmup,
                "warm-up steps, at most --steps (default min(200, steps/10))");
  t->add_option("--schedule", o.schedule, "cosine or constant")->capture_default_str();
  t->add_flag("--override-opt-param-scheduler", o.override_opt_param_scheduler,
              "resume under a learning-rate schedule (--lr, --min-lr, --warmup, --steps, "
              "--schedule) other than the checkpoint's (as Megatron's flag; refused otherwise)");
  t->add_option("--seed", o.seed, "seed of initialisation and data")
      ->check(moet::cli::unsigned_integer())
      ->capture_default_str();
  t->add_option("--threads", o.threads, "threads (default: all cores)");
  t->add_option("--precision", o.precision,
                "fp32, bf16, mxfp8, fp8-blockwise, or auto (bf16 where the CPU multiplies bf16, "
                "else fp32)")
      ->capture_default_str();
  t->add_option("--bf16-layers", o.bf16_layers,
                "FP8 recipes: the first and the last N decoder layers run in bf16")
      ->capture_default_str();
  t->add_option("--metrics", o.metrics_path,
                "write one JSON object per step to this file (default with --out RUN: "
                "RUN/metrics.jsonl)");
  t->add_flag("--overwrite,--overwrite-metrics", o.overwrite,
              "replace existing --metrics and --trace files (an empty one is replaced anyway)");
  t->add_option("--tensorboard", o.tensorboard_dir,
                "write TensorBoard event files into this directory (tags as Megatron's; "
                "docs/metrics.md); without one, into RUN/tensorboard of --out RUN")
      ->expected(0, 1);
  t->add_option("--log-expert-load", o.log_expert_load,
                "every N steps, the tokens each routed expert received per MoE layer, into "
                "--metrics and --tensorboard (0: never)")
      ->capture_default_str();
  t->add_option("--log-every", o.log_every, "steps between progress lines")->capture_default_str();
  t->add_option("--eval-every", o.eval_every, "steps between held-out evaluations (0: at the end)");
  t->add_option("--eval-batches", o.eval_batches, "held-out micro-batches per evaluation")
      ->capture_default_str();
  t->add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->capture_default_str();
  t->add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0: off)")
      ->capture_default_str();
  t->add_option("--mtp-lambda", o.mtp_lambda, "MTP loss weight")->capture_default_str();
  t->add_option("--balance-alpha", o.balance_alpha, "sequence-wise balance loss weight")
      ->capture_default_str();
  t->add_option("--z-loss", o.z_loss_coef, "router z-loss weight")->capture_default_str();
  t->add_option("--bias-update-rate", o.bias_update_rate,
                "aux-loss-free expert bias update rate gamma (DeepSeek-V3: 0.001; "
                "docs/training.md)")
      ->capture_default_str();
  t->add_option("--peak-tflops", o.peak_tflops,
                "peak TFLOP/s that MFU divides by, positive (default: the measured GEMM peak)");
  t->add_flag("--quiet", o.quiet, "no progress lines");
  t->add_option("--ep", o.ep, "expert-parallel size: ranks per expert group (under mpirun)")
      ->capture_default_str();
  t->add_flag("--a2a-overlap", o.a2a_overlap,
              "split each micro-batch in two halves whose stages interleave, so one half's "
              "all-to-alls travel under the other half's compute; under --pp, combined 1F1B: "
              "a forward and another micro-batch's backward interleave");
  t->add_option("--pp", o.pp,
                "pipeline stages (under mpirun; the world is pp x data-parallel ranks, the "
                "pipeline outermost as in Megatron)")
      ->capture_default_str();
  t->add_option("--vpp", o.vpp,
                "model chunks (virtual stages) per pipeline stage: interleaved 1F1B when > 1")
      ->capture_default_str();
  t->add_option("--pp-layout", o.pp_layout,
                "Megatron's pipeline layout, e.g. \"Et*2|t*2|t*2|t*2mL\" (default: the decoder "
                "layers split evenly over pp x vpp stages)");
  t->add_flag("--zero1", o.zero1,
              "ZeRO-1: shard the AdamW moments over the data-parallel ranks (bitwise the same "
              "training)");
  t->add_flag("--deterministic", o.deterministic,
              "one sequence at a time, gradients added in a fixed tree order: N data-parallel "
              "ranks give bit for bit what one process gives with an N-times larger micro-batch");
  t->add_option("--ep-ranks-per-node", o.ep_ranks_per_node,
                "ranks of an expert-parallel group that share a node (for bytes across nodes; "
                "n_group = nodes makes routing node-limited)");
  t->add_option("--trace", o.trace_path,
                "write a Perfetto/Chrome trace (compute and comm lanes), FILE.rankN.json per rank");
  t->add_option("--dispatcher", o.dispatcher,
                "expert token exchange with --ep > 1: alltoall or allgather")
      ->check(CLI::IsMember({"alltoall", "allgather"}))
      ->capture_default_str();
  t->add_option("--out", o.out_dir,
                "run directory for checkpoints (step-NNNNNNN/ and a 'latest' pointer); a run "
                "with --out saves at the end and on SIGTERM/SIGINT");
  t->add_option("--save-every", o.save_every, "steps between checkpoints (0: only at the end)")
      ->capture_default_str();
  t->add_option("--keep-last", o.keep_last, "keep only the newest K checkpoints (0: all)")
      ->capture_default_str();
  t->add_option("--resume", o.resume,
                "'auto' (the latest checkpoint in --out, or a fresh start), a run directory (its "
                "latest checkpoint) or a step-NNNNNNN directory");
  t->add_flag("--sync-save", o.sync_save,
              "write checkpoints on the training thread (default: in the background)");
  t->add_option("--skip-nonfinite", o.skip_nonfinite,
                "skip up to N steps whose loss is NaN or Inf (default 0: stop at the first)")
      ->capture_default_str();
  t->add_option("--init-from", o.init_from,
                "start from the weights of a checkpoint or a Hugging Face directory (fresh "
                "optimizer, step 0)");
  t->add_option("--overlap", o.overlap,
                "run the all-to-alls and gradient reductions on a communication thread behind "
                "compute: auto (when a core is free for it), on, off")
      ->capture_default_str();
}

// CLI11's line for a value it cannot convert joins every value a repeated flag was given
// ("Could not convert: --steps = 4,x"); the one that failed is the last (a flag takes its last).
std::string parse_error_line(const CLI::ParseError& e) {
  const std::string msg = e.what(), head = "Could not convert: ";
  const size_t eq = msg.find(" = ");
  if (msg.rfind(head, 0) != 0 || eq == std::string::npos) return msg;
  const std::string values = msg.substr(eq + 3);
  return msg.substr(head.size(), eq - head.size()) + ": '" +
         values.substr(values.find_last_of(',') + 1) + "' is not a valid value";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moet: pre-training engine for DeepSeek-V3-style mixture-of-experts models"};
  app.require_subcommand(1);
  moet::TrainOptions train;
  add_train_command(app, train);
  moet::cli::SimulateArgs simulate;
  moet::cli::PlanArgs plan;
  moet::cli::BenchArgs bench;
  moet::cli::CheckpointArgs checkpoint;
  moet::cli::ExportHfArgs export_hf;
  moet::cli::ImportHfArgs import_hf;
  moet::cli::EvalArgs eval;
  moet::cli::GenerateArgs generate;
  moet::cli::TokenizerArgs tokenizer;
  moet::cli::DataArgs data;
  moet::cli::ReportArgs report;
  moet::cli::ConfigArgs config;
  // Every command but train: its parser and what it runs (returning the exit status).
  struct Tool {
    CLI::App* app;
    std::function<int()> run;
  };
  const std::vector<Tool> tools = {
      {moet::cli::add_simulate_command(app, simulate),
       [&] { return moet::cli::run_simulate(simulate), 0; }},
      {moet::cli::add_plan_command(app, plan), [&] { return moet::cli::run_plan(plan), 0; }},
      {moet::cli::add_bench_command(app, bench), [&] { return moet::cli::run_bench(bench), 0; }},
      {moet::cli::add_checkpoint_command(app, checkpoint),
       [&] { return moet::cli::run_checkpoint(checkpoint); }},
      {moet::cli::add_export_hf_command(app, export_hf),
       [&] { return moet::cli::run_export_hf(export_hf), 0; }},
      {moet::cli::add_import_hf_command(app, import_hf),
       [&] { return moet::cli::run_import_hf(import_hf), 0; }},
      {moet::cli::add_eval_command(app, eval), [&] { return moet::cli::run_eval(eval), 0; }},
      {moet::cli::add_generate_command(app, generate),
       [&] { return moet::cli::run_generate(generate), 0; }},
      {moet::cli::add_tokenizer_command(app, tokenizer),
       [&] { return moet::cli::run_tokenizer(tokenizer); }},
      {moet::cli::add_data_command(app, data), [&] { return moet::cli::run_data(data); }},
      {moet::cli::add_report_command(app, report),
       [&] { return moet::cli::run_report(report), 0; }},
      {moet::cli::add_config_command(app, config),
       [&] { return moet::cli::run_config(config), 0; }},
  };
  // Under mpirun every rank parses the same flags: rank 0 alone reports a mistake.
  const bool reporter = moet::launcher_rank() == 0;
  if (argc > 1 && argv[1][0] != '-') {  // a mistyped command, before CLI11 reads its flags
    bool known = false;
    for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
      known |= c->get_name() == argv[1];
    if (!known) {
      if (reporter)
        std::fprintf(stderr, "moet: error: %s\n",
                     moet::cli::unknown_argument_line(app, 2, argv).c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    const std::string unknown = moet::cli::unknown_argument_line(app, argc, argv);
    if (reporter)
      std::fprintf(stderr, "moet: error: %s\n",
                   !unknown.empty() ? unknown.c_str()
                                    : (parse_error_line(e) + " (see moet --help)").c_str());
    return 2;
  }
  for (const Tool& t : tools) {
    if (!t.app->parsed()) continue;
    try {
      return t.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moet: %s\n", moet::failure_line(e).c_str());
      return 1;
    }
  }
  // Under mpirun every rank joins the job; a plain `moet train` never touches MPI.
  for (int i = 0; i < argc; ++i) train.command_line += (i ? " " : "") + std::string(argv[i]);
  std::unique_ptr<moet::MpiCommunicator> world;
  std::optional<moet::SetupAgreement> setup;
  try {
    if (moet::MpiCommunicator::launched_under_mpi())
      world = moet::MpiCommunicator::world(&argc, &argv);
    setup.emplace(world.get());
    moet::apply_run_directory_defaults(
        train, app.get_subcommand("train")->get_option("--tensorboard")->count() > 0);
    if (app.get_subcommand("train")->get_option("--seq")->count() == 0 &&
        moet::fit_default_seq_to_model(train) && reporter && !train.quiet)
      std::printf(
          "moet train: --seq %lld, the model's max_position_embeddings (the default 256 "
          "is longer)\n",
          (long long)train.seq);
    moet::run_training(train, world.get(), &*setup);
  } catch (const std::exception& e) {
    const std::string msg = moet::failure_line(e);
    // Refused before training began: the ranks agree on it, the first refusing rank reports
    // it, and all of them end cleanly (MPI_Finalize, no abort banner).
    if (setup && setup->pending()) setup->refuse();
    if (setup && setup->refused()) {
      if (setup->reports()) std::fprintf(stderr, "moet: %s\n", msg.c_str());
      return 1;
    }
    // A failing rank takes the whole job down at once, naming itself: never a hang.
    if (world && world->size() > 1) world->abort(msg);
    std::fprintf(stderr, "moet: %s\n", msg.c_str());
    return 1;
  }
  return 0;
}
