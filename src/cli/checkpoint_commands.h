// `moet checkpoint inspect PATH`: what a checkpoint holds, its checksums verified.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace moet::cli {

struct CheckpointArgs {
  std::string path;
  std::string other;       // diff: the second checkpoint
  bool tensors = false;    // list every tensor
  bool no_verify = false;  // skip reading the data
};

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointArgs& a);
// Returns the process exit status.
int run_checkpoint(const CheckpointArgs& a);

}  // namespace moet::cli
