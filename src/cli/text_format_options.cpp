#include "cli/text_format_options.h"

#include "cli/choice_option.h"

namespace moet::cli {

CLI::Option* add_doc_boundary_option(CLI::App* command, DocBoundary& boundary) {
  return add_choice_option(
      command, "--doc-boundary", boundary, doc_boundary_choices(),
      "plain-text data: documents end at lines that are exactly '%' (percent, the fortune "
      "format), at blank lines (blank-line), or at the end of each file (file); JSONL files "
      "hold one document a line (docs/data.md)");
}

void add_text_format_options(CLI::App* command, DocBoundary& boundary, std::string& json_key) {
  add_doc_boundary_option(command, boundary);
  command
      ->add_option("--json-key", json_key,
                   "JSONL data: the field of each line's object holding its document (Megatron's "
                   "--json-keys)")
      ->capture_default_str();
}

}  // namespace moet::cli
