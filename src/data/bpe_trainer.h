// `moet tokenizer train`: byte-level BPE training (GPT-2 regex pre-tokenizer, the 256 bytes as
// the initial alphabet, special tokens first), writing a tokenizer.json that Hugging Face
// `tokenizers` and transformers load and that BpeTokenizer encodes with (docs/tokenizer.md).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moet {

struct BpeTrainOptions {
  int64_t vocab_size = 0;  // special tokens + 256 bytes + merges
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|pad|>"};
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged
  int threads = 0;            // word counting threads (0: all cores)
};

struct BpeTrainStats {
  int64_t bytes = 0, words = 0, unique_words = 0, merges = 0;
};

// Trains on `texts` (each one document; invalid UTF-8 replaced by U+FFFD, special tokens written
// in it left out of the counts) and returns the tokenizer.json text.
std::string train_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& o,
                      BpeTrainStats* stats = nullptr);

}  // namespace moet
