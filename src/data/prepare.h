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
  std::vector<std::string> inputs;       // files, directories, or glob patterns
  std::string tokenizer = "byte";        // "byte" or a tokenizer.json
  std::string output;                    // PREFIX
  std::string json_key = "text";         // the field of each JSONL object holding the document
  std::string doc_boundary = "percent";  // plain text: percent, blank-line or file
  std::string on_bad_line = "skip";      // malformed JSONL lines: skip (and count) or stop
  int workers = 0;                       // tokenizing threads (0: all cores)
  bool overwrite = false;                // replace an existing PREFIX.bin/.idx
};

struct PrepareResult {
  std::vector<std::string> files;  // the input files, in the order read
  int64_t documents = 0, tokens = 0;
  int64_t bad_lines = 0;     // malformed JSONL lines skipped
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
// .jsonl / .jsonl.gz lines (the json_key string of each; a malformed line is skipped and counted
// in *bad_lines), other files as plain text (.gz decompressed) split by `boundary`.
void for_each_file_document(const std::string& path, const std::string& json_key,
                            DocBoundary boundary, const std::function<void(std::string_view)>& doc,
                            int64_t* bad_lines);

}  // namespace moet
