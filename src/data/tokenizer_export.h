// A moet tokenizer as the files transformers' AutoTokenizer reads (tokenizer.json and
// tokenizer_config.json), for `moet export-hf` (docs/huggingface.md): a run's BPE tokenizer.json
// copied as it is; the built-in byte tokenizer written as a byte-level BPE without merges whose
// id of each byte is the byte itself, and the end of document its added special token.
#pragma once
#include <cstdint>
#include <string>

namespace moet {

struct ExportedTokenizer {
  int32_t eos_id = -1;         // the end-of-document token: eos (and bos) of the model's config
  std::string eos_token;       // its text
  std::string pad_token;       // "<|pad|>" when the tokenizer has one, else the eos token
  std::string description;     // for the command's output
};

// Writes out_dir/tokenizer.json and out_dir/tokenizer_config.json for `spec` ("byte" or a
// tokenizer.json), model_max_length max_positions.
ExportedTokenizer export_hf_tokenizer(const std::string& spec, const std::string& out_dir,
                                      int64_t max_positions);

}  // namespace moet
