// `moet tokenizer train|encode|decode` (docs/tokenizer.md): argument parsing and printing; the
// work is in src/data/bpe_tokenizer.h and src/data/bpe_trainer.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "data/documents.h"

namespace moet::cli {

struct TokenizerArgs {
  CLI::App *train = nullptr, *encode = nullptr, *decode = nullptr;
  // train
  std::vector<std::string> inputs, special_tokens = {"<|endoftext|>", "<|pad|>"};
  std::string output;
  DocBoundary doc_boundary = DocBoundary::kPercent;  // how inputs become documents
  std::string json_key = "text";
  int64_t vocab_size = 0, min_frequency = 2;
  bool overwrite = false;
  // encode / decode
  std::string tokenizer = "byte", text, input, ids;
  bool ids_only = false, add_special = false, timing = false, jsonl = false;
  int threads = 0;
};

CLI::App* add_tokenizer_command(CLI::App& app, TokenizerArgs& a);
int run_tokenizer(const TokenizerArgs& a);

}  // namespace moet::cli
