// How plain text splits into documents (text datasets and `moet data prepare`).
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace moet {

enum class DocBoundary {
  kPercent,    // lines that are exactly "%" (the fortune format) separate documents
  kBlankLine,  // one or more empty (or white-space only) lines separate documents
  kFile,       // each file is one document
};

// "percent", "blank-line" or "file"; throws moet::Error naming the choices otherwise.
DocBoundary parse_doc_boundary(const std::string& name);

// Calls `doc` with each non-empty document of `text` in order (separator lines excluded; a
// document keeps its final newline). A text without separators is one document.
void for_each_document(std::string_view text, DocBoundary boundary,
                       const std::function<void(std::string_view)>& doc);

}  // namespace moet
