// Byte-level tokenizer: token i < 256 is byte i; token 256 marks the end of a document.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace moet {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEod = 256;
  static constexpr int64_t kVocabSize = 257;

  int64_t vocab_size() const override { return kVocabSize; }
  std::string describe() const override { return "bytes (257 ids: 256 bytes + end of document)"; }
  int32_t eod_id() const override { return kEod; }

  // One token per byte; no EOD is added.
  using Tokenizer::encode;
  // Appends the tokens of `text` to `out`.
  void encode_append(std::string_view text, std::vector<int32_t>& out) const override;
  // Bytes of the ids; the EOD is written as nothing.
  std::string decode(const int32_t* ids, int64_t n) const override { return decode(ids, n, ""); }
  // Bytes of the ids; each EOD becomes `eod_text`. Throws moet::Error for an id outside
  // [0, 256].
  std::string decode(const int32_t* ids, int64_t n, std::string_view eod_text) const;
  std::string decode(const std::vector<int32_t>& ids, std::string_view eod_text = "") const {
    return decode(ids.data(), static_cast<int64_t>(ids.size()), eod_text);
  }
};

}  // namespace moet
