#include "data/documents.h"

#include "core/choices.h"
#include "core/error.h"
#include "core/warning.h"

namespace moet {
namespace {

bool is_separator(std::string_view line, DocBoundary boundary) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (boundary == DocBoundary::kPercent) return line == "%";
  return line.find_first_not_of(" \t\f\v") == std::string_view::npos;
}

}  // namespace

const std::vector<std::pair<std::string, DocBoundary>>& doc_boundary_choices() {
  static const std::vector<std::pair<std::string, DocBoundary>> c = {
      {"percent", DocBoundary::kPercent},
      {"blank-line", DocBoundary::kBlankLine},
      {"file", DocBoundary::kFile}};
  return c;
}

const char* doc_boundary_name(DocBoundary boundary) {
  return choice_name(doc_boundary_choices(), boundary);
}

void SingleDocumentFiles::add(const std::string& path, int64_t documents) {
  ++files_;
  if (boundary_ == DocBoundary::kFile || documents != 1) return;
  if (single_++ == 0) first_ = path;
}

void SingleDocumentFiles::warn() const {
  if (single_ == 0) return;
  const char* separator =
      boundary_ == DocBoundary::kPercent ? "no line is exactly '%'" : "no blank line";
  moet::warn(str("'", first_, "'",
                 single_ > 1 ? str(" and ", single_ - 1, " more of the ", files_, " text files")
                             : std::string(),
                 single_ > 1 ? " hold" : " holds", " a single document under --doc-boundary ",
                 doc_boundary_name(boundary_), " (", separator, "); if documents end elsewhere, ",
                 "choose --doc-boundary ",
                 boundary_ == DocBoundary::kPercent ? "blank-line or file" : "percent or file"));
}

void for_each_document(std::string_view text, DocBoundary boundary,
                       const std::function<void(std::string_view)>& doc) {
  if (boundary == DocBoundary::kFile) {
    if (!text.empty()) doc(text);
    return;
  }
  size_t pos = 0, doc_begin = 0;
  auto end_doc = [&](size_t doc_end) {
    if (doc_end > doc_begin) doc(text.substr(doc_begin, doc_end - doc_begin));
  };
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t line_end = nl == std::string_view::npos ? text.size() : nl;
    const size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
    if (is_separator(text.substr(pos, line_end - pos), boundary)) {
      end_doc(pos);
      doc_begin = next;
    }
    pos = next;
  }
  end_doc(text.size());
}

}  // namespace moet
