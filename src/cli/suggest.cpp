#include "cli/suggest.h"

#include <algorithm>
#include <numeric>

namespace moet::cli {

namespace {

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// "--name" for each long name and "-n" for each short one of app's flags and options.
std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

const CLI::Option* find_flag(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames())
      if (name == "--" + l) return opt;
    for (const std::string& s : opt->get_snames())
      if (name == "-" + s) return opt;
  }
  return nullptr;
}

bool looks_like_flag(const std::string& arg) {
  return arg.size() >= 2 && arg[0] == '-' &&
         (std::isalpha(static_cast<unsigned char>(arg[1])) || (arg[1] == '-' && arg.size() > 2));
}

}  // namespace

std::string command_list(const CLI::App& app) {
  std::string names;
  for (const CLI::App* s : subcommands_of(app))
    names += (names.empty() ? "" : ", ") + s->get_name();
  return names;
}

namespace {

// Megatron-LM's names of flags moet has under another name: (Megatron flag, moet flag, or a
// sentence when moet has no one flag for it).
struct MegatronName {
  const char* theirs;
  const char* ours;
  const char* note;
};
constexpr MegatronName kMegatronNames[] = {
    {"--train-iters", "--steps", nullptr},
    {"--micro-batch-size", "--micro-batch", nullptr},
    {"--global-batch-size", nullptr,
     "moet's global batch is --micro-batch x --grad-accum x the data-parallel ranks"},
    {"--seq-length", "--seq", nullptr},
    {"--max-position-embeddings", nullptr, "moet reads max_position_embeddings from --model"},
    {"--lr-warmup-iters", "--warmup", nullptr},
    {"--lr-decay-style", "--schedule", nullptr},
    {"--clip-grad", "--grad-clip", nullptr},
    {"--save-interval", "--save-every", nullptr},
    {"--save", "--out", nullptr},
    {"--load", "--resume", nullptr},
    {"--pretrained-checkpoint", "--init-from", nullptr},
    {"--tensorboard-dir", "--tensorboard", nullptr},
    {"--log-interval", "--log-every", nullptr},
    {"--eval-interval", "--eval-every", nullptr},
    {"--eval-iters", "--eval-batches", nullptr},
    {"--data-path", "--data", nullptr},
    {"--tokenizer-model", "--tokenizer", nullptr},
    {"--json-keys", "--json-key", nullptr},
    {"--bf16", nullptr, "moet's recipe is --precision bf16"},
    {"--fp8-recipe", nullptr, "moet's recipes are --precision mxfp8 and --precision fp8-blockwise"},
    {"--fp8-format", nullptr, "moet's recipes are --precision mxfp8 and --precision fp8-blockwise"},
    {"--fp4-recipe", nullptr, "moet's recipes are --precision nvfp4 and --precision mxfp4"},
    {"--fp4-format", nullptr,
     "moet's FP4 recipes (E2M1 elements) are --precision nvfp4 and --precision mxfp4"},
    {"--first-last-layers-bf16", "--bf16-layers", nullptr},
    {"--num-layers-at-start-in-bf16", "--bf16-layers", nullptr},
    {"--num-layers-at-end-in-bf16", "--bf16-layers-end", nullptr},
    {"--expert-model-parallel-size", "--ep", nullptr},
    {"--pipeline-model-parallel-size", "--pp", nullptr},
    {"--virtual-pipeline-model-parallel-size", "--vpp", nullptr},
    {"--pipeline-model-parallel-layout", "--pp-layout", nullptr},
    {"--use-distributed-optimizer", "--zero1", nullptr},
    {"--moe-token-dispatcher-type", "--dispatcher", nullptr},
    {"--moe-router-bias-update-rate", "--bias-update-rate", nullptr},
    {"--moe-aux-loss-coeff", "--balance-alpha", nullptr},
    {"--moe-z-loss-coeff", "--z-loss", nullptr},
    {"--mtp-loss-scaling-factor", "--mtp-lambda", nullptr},
    {"--deterministic-mode", "--deterministic", nullptr},
};

// "Megatron's name: moet calls it --steps" for a Megatron flag `app` has under another name.
std::string megatron_note(const CLI::App& app, const std::string& name) {
  for (const MegatronName& m : kMegatronNames) {
    if (name != m.theirs) continue;
    if (m.ours && find_flag(app, m.ours)) return std::string("moet calls it ") + m.ours;
    if (m.note && app.get_name() == "train") return m.note;
  }
  return "";
}

}  // namespace

std::string unknown_argument_line(const CLI::App& root, int argc, const char* const* argv) {
  const CLI::App* app = &root;
  std::string path = "moet";     // (CLI11 names the root after argv[0], a path)
  bool positional_seen = false;  // a command's own argument: no subcommand can follow
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // the rest are values
    if (looks_like_flag(arg)) {
      const std::string name = arg.substr(0, arg.find('='));
      const CLI::Option* opt = find_flag(*app, name);
      if (!opt) {
        const std::string megatron = megatron_note(*app, name);
        if (!megatron.empty())
          return "unknown flag " + name + " (Megatron's name: " + megatron + ")";
        const std::string near = nearest_name(name, flag_names(*app));
        return "unknown flag " + name +
               (near.empty() ? " (see " + path + " --help)" : " (did you mean " + near + "?)");
      }
      if (name.size() < arg.size() || opt->get_type_size_max() == 0) continue;  // --x=v, a flag
      // the option's values: one, or (a list) every following argument that is no flag
      if (opt->get_expected_max() <= 1) {
        ++i;
      } else {
        while (i + 1 < argc && !looks_like_flag(argv[i + 1])) ++i;
      }
      continue;
    }
    const std::vector<const CLI::App*> subs = subcommands_of(*app);
    const auto sub = std::find_if(subs.begin(), subs.end(),
                                  [&](const CLI::App* s) { return s->get_name() == arg; });
    if (sub != subs.end() && !positional_seen) {
      app = *sub;
      path += " " + arg;
      continue;
    }
    if (!subs.empty() && !positional_seen &&
        app->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty()) {
      std::vector<std::string> names;
      for (const CLI::App* s : subs) names.push_back(s->get_name());
      const std::string near = nearest_name(arg, names);
      const std::string in = path == "moet" ? "" : path.substr(5) + " ";
      return "unknown command '" + in + arg + "' (" +
             (near.empty() ? "" : "did you mean '" + in + near + "'? ") +
             "commands: " + command_list(*app) + "; see " + path + " --help)";
    }
    positional_seen = true;
  }
  return "";
}

}  // namespace moet::cli
