// `moet data prepare` (text/JSONL to a Megatron indexed dataset) and `moet data inspect` (what a
// PREFIX.bin/.idx holds): argument parsing; the work is in src/data/ (docs/data.md).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "data/prepare.h"

namespace moet::cli {

struct DataArgs {
  CLI::App* prepare = nullptr;
  CLI::App* inspect = nullptr;
  PrepareOptions prep;
  std::string prefix;          // inspect
  std::optional<int64_t> doc;  // inspect: print this document's tokens
  std::string tokenizer;       // inspect: decode the document with this tokenizer
  bool no_progress = false;    // prepare: no progress bar even on a terminal
};

CLI::App* add_data_command(CLI::App& app, DataArgs& a);
int run_data(const DataArgs& a);

}  // namespace moet::cli
