#include "cli/config_commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/config_fields.h"

namespace moet::cli {

CLI::App* add_config_command(CLI::App& app, ConfigArgs& a) {
  CLI::App* c = app.add_subcommand(
      "config", "the model a config.json builds: every field as moet reads it, and its size");
  c->add_option("config", a.path, "a DeepSeek-V3 config.json")->required();
  c->add_flag("--json", a.json, "print the fields as JSON (Hugging Face names)");
  return c;
}

void run_config(const ConfigArgs& a) {
  const ModelConfig c = load_model_config(a.path);
  const nlohmann::ordered_json j = model_config_json(c);
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: %.1fM parameters, %lld layers (%lld MoE), %lld routed experts top-%lld\n",
              a.path.c_str(), double(count_parameters(c)) / 1e6, (long long)c.num_hidden_layers,
              (long long)c.num_moe_layers(), (long long)c.n_routed_experts,
              (long long)c.num_experts_per_tok);
  for (const auto& [k, v] : j.items()) std::printf("  %s: %s\n", k.c_str(), v.dump().c_str());
}

}  // namespace moet::cli
