// How plain text splits into documents (text datasets and `moet data prepare`).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moet {

enum class DocBoundary {
  kPercent,    // lines that are exactly "%" (the fortune format) separate documents
  kBlankLine,  // one or more empty (or white-space only) lines separate documents
  kFile,       // each file is one document
};

// How text inputs become documents: where plain text splits, and which field of a JSONL object
// holds the document (Megatron's --json-keys) — one setting for every reader of text.
struct TextFormat {
  DocBoundary boundary = DocBoundary::kPercent;
  std::string json_key = "text";
};

// The flag value of a rule: "percent", "blank-line" or "file".
const char* doc_boundary_name(DocBoundary boundary);
// Every rule and its flag value, in that order (the command line's choices).
const std::vector<std::pair<std::string, DocBoundary>>& doc_boundary_choices();

// Collects the plain-text files that split into a single document under a rule other than
// kFile (probably the wrong rule for that text) and warns about them in one line (moet::warn).
class SingleDocumentFiles {
 public:
  explicit SingleDocumentFiles(DocBoundary boundary) : boundary_(boundary) {}
  // A plain-text file and the documents it held.
  void add(const std::string& path, int64_t documents);
  // "moet: warning: 'a.txt' holds a single document under --doc-boundary percent ..." when a
  // file did (once, naming the first and counting the others); nothing otherwise.
  void warn() const;

 private:
  DocBoundary boundary_;
  int64_t files_ = 0, single_ = 0;
  std::string first_;
};

// Calls `doc` with each non-empty document of `text` in order (separator lines excluded; a
// document keeps its final newline). A text without separators is one document.
void for_each_document(std::string_view text, DocBoundary boundary,
                       const std::function<void(std::string_view)>& doc);

}  // namespace moet
