// `moet export-hf`, `moet import-hf` (Hugging Face interop, docs/huggingface.md): argument
// parsing; the work is in src/checkpoint/hf.h. `moet eval` is in cli/eval_commands.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace moet::cli {

struct ExportHfArgs {
  std::string checkpoint, out_dir, dtype = "bf16";
  std::string tokenizer;  // "" = the run's tokenizer.json, else 'byte'
  int64_t max_shard_bytes = 5'000'000'000;
  bool overwrite = false;  // replace an existing non-empty OUT_DIR
  bool no_mtp = false;     // leave the MTP modules out (transformers does not use them)
};

struct ImportHfArgs {
  std::string hf_dir, out_checkpoint;
  uint64_t seed = 1234;  // initialises what the directory lacks (MTP modules transformers drops)
};

CLI::App* add_export_hf_command(CLI::App& app, ExportHfArgs& a);
CLI::App* add_import_hf_command(CLI::App& app, ImportHfArgs& a);
void run_export_hf(const ExportHfArgs& a);
void run_import_hf(const ImportHfArgs& a);

}  // namespace moet::cli
