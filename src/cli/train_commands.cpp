#include "cli/train_commands.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "cli/flag_validators.h"
#include "core/error.h"
#include "core/overloaded.h"
#include "core/warning.h"
#include "parallel/mpi_communicator.h"
#include "train/option_fields.h"
#include "train/setup_agreement.h"
#include "train/train_options_check.h"
#include "train/trainer.h"

namespace moet::cli {

namespace {

// A flag taking words: one (an enum) or several (a list), each one of the choice's words.
CLI::Option* add_words(CLI::App* t, const OptionField& f, TrainOptions& o, const ChoiceRef& c) {
  std::string names;
  for (const std::string& w : c.words) names += (names.empty() ? "" : ", ") + w;
  const std::string flag = f.flags;
  auto set = [&o, c, flag, names](const std::vector<std::string>& words) {
    const std::string bad = c.set(o, words);
    if (!bad.empty()) throw CLI::ValidationError(flag + " '" + bad + "' is not one of " + names);
  };
  CLI::Option* opt = c.list ? t->add_option_function<std::vector<std::string>>(f.flags, set, f.help)
                            : t->add_option_function<std::string>(
                                  f.flags, [set](const std::string& w) { set({w}); }, f.help);
  if (c.list) opt->expected(1, -1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const std::vector<std::string> now = c.get(o);
  if (!c.list && !now.empty()) opt->default_str(now[0]);
  return opt;
}

// One row of the options table as a flag bound to its member of `o`.
void add_flag_of(CLI::App* t, const OptionField& f, TrainOptions& o) {
  CLI::Option* opt = std::visit(
      Overloaded{[&](const ChoiceRef& c) { return add_words(t, f, o, c); },
                 [&](OptionRef<bool> ref) { return t->add_flag(f.flags, ref(o), f.help); },
                 [&](auto ref) {
                   auto& member = ref(o);
                   CLI::Option* added = t->add_option(f.flags, member, f.help);
                   using T = std::decay_t<decltype(member)>;
                   if constexpr (std::is_same_v<T, uint64_t> ||
                                 std::is_same_v<T, std::optional<uint64_t>>)
                     added->check(unsigned_integer());  // a sign is refused, not wrapped around
                   return added;
                 }},
      f.access);
  if (f.style == FlagStyle::kValueShown) opt->capture_default_str();
  if (f.style == FlagStyle::kRequired) opt->required();
  if (f.style == FlagStyle::kOptionalValue) opt->expected(0, 1);
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainOptions& o) {
  CLI::App* t = app.add_subcommand("train", "train a DeepSeek-V3-style MoE model on the CPU");
  // A flag given twice takes the last value (scripts add defaults, users override them).
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const OptionField& f : train_option_fields())
    if (f.style != FlagStyle::kNone) add_flag_of(t, f, o);
  // read by main() before the flags (cli/config_file.h); declared here for --help
  static std::string config_file;
  t->add_option("--config", config_file,
                "a FILE.yaml or FILE.json of train's flags (\"micro-batch: 4\"), read first: "
                "flags on the command line override it; run.json keeps it");
  return t;
}

int run_train(TrainOptions& o, const CLI::App& t, int& argc, char**& argv,
              const std::string& config_file) {
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
  o.config_file = config_file;
  const bool reporter = launcher_rank() == 0;
  std::unique_ptr<MpiCommunicator> world;
  std::optional<SetupAgreement> setup;
  try {
    if (MpiCommunicator::launched_under_mpi()) world = MpiCommunicator::world(&argc, &argv);
    setup.emplace(world.get());
    apply_run_directory_defaults(o, t.get_option("--tensorboard")->count() > 0);
    resolve_train_tokenizer(o);
    if (t.get_option("--seq")->count() == 0 && fit_default_seq_to_model(o) && reporter &&
        !o.logging.quiet)
      std::printf(
          "moet train: --seq %lld, the model's max_position_embeddings (the default 256 "
          "is longer)\n",
          (long long)o.data.seq);
    run_training(o, world.get(), &*setup);
  } catch (const std::exception& e) {
    const std::string msg = failure_line(e);
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

}  // namespace moet::cli
