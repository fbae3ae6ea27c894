// `moet export-hf`, `moet import-hf` (Hugging Face interop, docs/huggingface.md) and `moet eval`
// (held-out loss of a checkpoint): argument parsing; the work is in src/checkpoint/hf.h and
// src/train/evaluation.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
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

// Unset flags take the run's settings from the checkpoint (its checkpoint.json: the data, how they
// were read and held out, the sequence, the micro-batch, the evaluation batches, the recipe), so
// `moet eval --checkpoint RUN` evaluates what training evaluated; the values after "=" are the
// defaults of a checkpoint that records none.
struct EvalArgs {
  CLI::App* app = nullptr;  // which flags were given
  std::string checkpoint, dump;
  std::string data;       // = "" (the default English corpus)
  std::string tokenizer;  // = the run's tokenizer.json, else 'byte'
  std::string split;      // = 95,5
  std::string doc_boundary = "percent", json_key = "text";
  std::string precision;                                 // = fp32
  int64_t bf16_layers = 1, batches = 4, micro_batch = 8;
  std::optional<int64_t> seq;  // = min(256, max_position_embeddings)
  uint64_t seed = 1234;
  int threads = 0;
  bool overwrite = false;  // replace an existing --dump file
  bool json = false;       // the result as one JSON line (full precision)
};

// --doc-boundary of moet train and moet eval: where the documents of plain text end.
CLI::Option* add_doc_boundary_option(CLI::App* command, std::string& boundary);
// --doc-boundary and --json-key: how text data become documents (data/documents.h TextFormat).
void add_text_format_options(CLI::App* command, std::string& boundary, std::string& json_key);

CLI::App* add_export_hf_command(CLI::App& app, ExportHfArgs& a);
CLI::App* add_import_hf_command(CLI::App& app, ImportHfArgs& a);
CLI::App* add_eval_command(CLI::App& app, EvalArgs& a);
void run_export_hf(const ExportHfArgs& a);
void run_import_hf(const ImportHfArgs& a);
void run_eval(const EvalArgs& a);

}  // namespace moet::cli
