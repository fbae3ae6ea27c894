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
#include "cli/config_file.h"
#include "cli/data_commands.h"
#include "cli/eval_commands.h"
#include "cli/flag_validators.h"
#include "cli/generate_commands.h"
#include "cli/hf_commands.h"
#include "cli/megatron_precision_flags.h"
#include "cli/report_commands.h"
#include "cli/sim_commands.h"
#include "cli/suggest.h"
#include "cli/text_format_options.h"
#include "cli/tokenizer_commands.h"
#include "cli/train_commands.h"
#include "core/error.h"
#include "core/warning.h"

namespace {

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

int main(int argc_given, char** argv_given) {
  // `moet train --config FILE`: the file's flags first, then the command line's (config_file.h)
  std::vector<std::string> args(argv_given, argv_given + argc_given);
  std::string config_path;
  try {
    args = moet::cli::expand_config_file(args, &config_path);
    args = moet::cli::translate_megatron_precision_flags(args);
  } catch (const std::exception& e) {
    if (moet::launcher_rank() == 0)
      std::fprintf(stderr, "moet: %s\n", moet::failure_line(e).c_str());
    return 2;
  }
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  arg_ptrs.push_back(nullptr);
  int argc = int(args.size());
  char** argv = arg_ptrs.data();
  CLI::App app{"moet: pre-training engine for DeepSeek-V3-style mixture-of-experts models"};
  app.require_subcommand(1);
  moet::TrainOptions train;
  CLI::App* train_app = moet::cli::add_train_command(app, train);
  moet::cli::SimulateArgs simulate;
  moet::cli::PlanArgs plan;
  moet::cli::PublishedArgs published;
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
      {train_app, [&] { return moet::cli::run_train(train, *train_app, argc, argv, config_path); }},
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
      {moet::cli::add_published_command(app, published),
       [&] { return moet::cli::run_published(published), 0; }},
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
  return 0;
}
