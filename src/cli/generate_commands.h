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
  // unset: greedy as transformers' generate, unless --top-k or --top-p ask for sampling (then 1)
  std::optional<double> temperature;
  std::optional<int64_t> top_k;  // unset: all tokens
  std::optional<double> top_p;   // unset: 1, the whole distribution
  uint64_t seed = 0;
  int threads = 0;
  bool print_ids = false;  // the new token ids on stdout instead of text
  bool no_echo = false;    // text mode: the continuation only, without the prompt
};

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& a);
void run_generate(const GenerateArgs& a);

}  // namespace moet::cli
