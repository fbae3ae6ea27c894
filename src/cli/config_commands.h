// `moet config CONFIG.json`: the model a config.json builds, every field as moet reads it (the
// ones the file does not set at the defaults transformers' DeepseekV3Config takes), the
// parameter count; --json for the fields as a Hugging Face config (docs/model.md).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace moet::cli {

struct ConfigArgs {
  std::string path;
  bool json = false;
};

CLI::App* add_config_command(CLI::App& app, ConfigArgs& a);
void run_config(const ConfigArgs& a);

}  // namespace moet::cli
