// `moet eval` (held-out loss of a checkpoint): argument parsing; the work is in
// src/train/evaluation.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "data/documents.h"

namespace moet::cli {

// Unset flags take the run's settings from the checkpoint (its checkpoint.json: the data, how they
// were read and held out, the sequence, the micro-batch, the evaluation batches, the recipe), so
// `moet eval --checkpoint RUN` evaluates what training evaluated; the values after "=" are the
// defaults of a checkpoint that records none.
// --batches all: every held-out batch.
constexpr int64_t kAllBatches = INT64_MAX;

struct EvalArgs {
  CLI::App* app = nullptr;  // which flags were given
  std::string checkpoint, dump;
  std::string data;       // = "" (the default English corpus)
  std::string tokenizer;  // = the run's tokenizer.json, else 'byte'
  std::string split;      // = 95,5
  DocBoundary doc_boundary = DocBoundary::kPercent;
  std::string json_key = "text";
  std::string precision;  // = fp32
  int64_t bf16_layers = 1, batches = 4, micro_batch = 8;
  std::optional<int64_t> bf16_layers_end;  // = the run's, else as --bf16-layers
  std::string batches_text;                // --batches as given: N or "all" ("" = not given)
  std::optional<int64_t> seq;              // = min(256, max_position_embeddings)
  uint64_t seed = 1234;
  int threads = 0;
  bool overwrite = false;  // replace an existing --dump file
  bool json = false;       // the result as one JSON line (full precision)
};

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a);
void run_eval(const EvalArgs& a);

}  // namespace moet::cli
