#include "data/documents.h"

#include "core/error.h"

namespace moet {
namespace {

bool is_separator(std::string_view line, DocBoundary boundary) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (boundary == DocBoundary::kPercent) return line == "%";
  return line.find_first_not_of(" \t\f\v") == std::string_view::npos;
}

}  // namespace

DocBoundary parse_doc_boundary(const std::string& name) {
  if (name == "percent") return DocBoundary::kPercent;
  if (name == "blank-line") return DocBoundary::kBlankLine;
  if (name == "file") return DocBoundary::kFile;
  MOET_FAIL("document boundary '", name, "' is not known: percent, blank-line or file");
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
