// --doc-boundary and --json-key, the flags of the commands that read text data (moet train,
// moet eval, moet tokenizer train).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace moet::cli {

// --doc-boundary of moet train and moet eval: where the documents of plain text end.
CLI::Option* add_doc_boundary_option(CLI::App* command, std::string& boundary);
// --doc-boundary and --json-key: how text data become documents (data/documents.h TextFormat).
void add_text_format_options(CLI::App* command, std::string& boundary, std::string& json_key);

}  // namespace moet::cli
