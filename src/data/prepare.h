// `moet data prepare`: text files and JSONL (optionally gzip-compressed) tokenized into a
// Megatron indexed dataset (PREFIX.bin/.idx), on several threads, in input order
// (docs/data.md).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/documents.h"

namespace moet {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories, or glob patterns
  std::string tokenizer = "byte";   // "byte" or a tokenizer.json
  std::string output;               // PREFIX
  std::string json_key = "text";    // the field of each JSONL object holding the document
  DocBoundary doc_boundary = DocBoundary::kPercent;  // plain text: where documents end
  std::string on_bad_line = "skip";  // malformed JSONL lines: skip (and count) or stop
  int workers = 0;                   // tokenizing threads (0: all cores)
  bool overwrite = false;            // replace an existing PREFIX.bin/.idx
};

// What reading JSON Lines skipped, so a refusal can say why: lines that are not JSON objects (or
// whose document is not a string), and objects without the document's key — with the keys they
// had, which names the --json-key that would read them.
struct JsonlSkips {
  int64_t malformed = 0;               // not JSON, not an object, or the key's value not a string
  int64_t missing_key = 0;             // JSON objects without the key
  std::vector<std::string> keys_seen;  // keys of those objects, in first-seen order (a few)
  std::string first_malformed;         // "FILE:LINE: why" of the first malformed line
  int64_t total() const { return malformed + missing_key; }
  void merge(const JsonlSkips& o);
  // "" when no object lacked the key; else "12 JSONL lines have no "text" field (their keys:
  // content, id; --json-key content reads them)".
  std::string missing_key_note(const std::string& key) const;
};

struct PrepareResult {
  std::vector<std::string> files;  // the input files, in the order read
  int64_t documents = 0, tokens = 0;
  int64_t bad_lines = 0;     // JSONL lines skipped (malformed, or without the key)
  JsonlSkips skips;          // which, and why
  int64_t input_bytes = 0;   // bytes of the input files as stored (compressed for .gz)
  int64_t output_bytes = 0;  // PREFIX.bin
  std::string dtype;         // "uint16" or "int32"
  double seconds = 0;
};

// Writes PREFIX.bin/.idx from the files expand_inputs(options.inputs) names (nothing under those
// names unless complete; an existing pair is kept unless overwrite). Files ending in .jsonl or
// .jsonl.gz are JSON Lines (one object per line, the document in json_key); others are plain text
// (.gz decompressed) split into documents by doc_boundary. Each document is followed by the
// tokenizer's end-of-document token. `progress`: where to draw a one-line progress bar updated with
// \r (null: none).
PrepareResult prepare_data(const PrepareOptions& options, std::FILE* progress);

// Whether prepare_data reads `path` as JSON Lines (it ends in .jsonl or .jsonl.gz).
bool is_jsonl_path(const std::string& path);

// The documents of one input file as prepare_data reads them, in order, on the calling thread:
// .jsonl / .jsonl.gz lines (the json_key string of each; a line without it is skipped and
// counted in *skips), other files as plain text (.gz decompressed) split by `boundary`. Every
// reader of text — `moet data prepare`, `moet tokenizer train`, text data for `moet train` and
// `moet eval` — reads files this way.
void for_each_file_document(const std::string& path, const std::string& json_key,
                            DocBoundary boundary, const std::function<void(std::string_view)>& doc,
                            JsonlSkips* skips);

// The one-line refusal for inputs that held no document: "no documents in the input (2 files)"
// followed by what the JSONL lines lacked, if that is why.
std::string no_documents_message(size_t files, const JsonlSkips& skips, const std::string& key);

}  // namespace moet
