// --doc-boundary and --json-key, the flags of the commands that read text data (moet train,
// moet eval, moet tokenizer train, moet data prepare).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "data/documents.h"

namespace moet::cli {

// --doc-boundary: where the documents of plain text end, parsed into its rule.
CLI::Option* add_doc_boundary_option(CLI::App* command, DocBoundary& boundary);
// --doc-boundary and --json-key: how text data become documents (data/documents.h TextFormat).
void add_text_format_options(CLI::App* command, DocBoundary& boundary, std::string& json_key);

}  // namespace moet::cli
