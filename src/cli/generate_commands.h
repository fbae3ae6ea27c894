// `moet generate`: text (or token ids) from a checkpoint, streamed as it is produced
// (docs/generate.md). Argument parsing, the tokenizer's choice and the output; the decoding is in
// src/model/inference.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace moet::cli {

struct GenerateArgs {
  std::string checkpoint, prompt, prompt_ids, tokenizer;
  std::optional<int64_t> max_new_tokens;  // unset: min(128, max_position_embeddings - prompt)
  double temperature = 1.0;               // 0: greedy
  int64_t top_k = 0;                      // 0: all tokens
  double top_p = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  bool print_ids = false;  // the new token ids on stdout instead of text
};

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& a);
void run_generate(const GenerateArgs& a);

}  // namespace moet::cli
