// Text of tokens as they come (`moet generate`'s streamed output, docs/generate.md): after each
// token, the decoded text beyond what is already out — less an incomplete UTF-8 sequence at its
// end, or a trailing U+FFFD a tokenizer may write for one, which wait for the next token.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace moet {

// The length of the longest prefix of s that does not end inside a UTF-8 sequence: a trailing
// lead byte with fewer continuation bytes than it announces is left out.
size_t complete_utf8_prefix(std::string_view s);

class TextStream {
 public:
  // write receives each new piece of text.
  TextStream(const Tokenizer& tok, std::function<void(std::string_view)> write);
  // Adds a token (ids the tokenizer has no text for are skipped) and writes what is complete.
  void push(int32_t id);
  // Writes whatever is held back.
  void finish();

 private:
  void emit(const std::string& text, size_t end);
  const Tokenizer& tok_;
  std::function<void(std::string_view)> write_;
  std::vector<int32_t> ids_;
  size_t written_ = 0;
};

}  // namespace moet
