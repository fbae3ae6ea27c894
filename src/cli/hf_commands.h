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
  int64_t max_shard_bytes = 5'000'000'000;
  bool overwrite = false;  // replace an existing non-empty OUT_DIR
};

struct ImportHfArgs {
  std::string hf_dir, out_checkpoint;
  uint64_t seed = 1234;  // initialises what the directory lacks (MTP modules transformers drops)
};

struct EvalArgs {
  std::string checkpoint, data, dump;
  std::string tokenizer,
      split;  // text data's tokenizer ("" = the run's); document split ("" = 95,5)
  std::string doc_boundary = "percent";  // plain text: where documents end
  std::string json_key = "text";         // JSONL: the field holding a document
  int64_t batches = 4, micro_batch = 8;
  std::optional<int64_t> seq;  // unset: min(256, max_position_embeddings)
  uint64_t seed = 1234;
  int threads = 0;
  bool overwrite = false;  // replace an existing --dump file
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
