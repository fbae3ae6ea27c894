#include "data/text_stream.h"

#include <algorithm>

namespace moet {

size_t complete_utf8_prefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return back < want ? n - back : n;
  }
  return n;
}

TextStream::TextStream(const Tokenizer& tok, std::function<void(std::string_view)> write)
    : tok_(tok), write_(std::move(write)) {}

void TextStream::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size()) return;
  ids_.push_back(id);
  const std::string text = tok_.decode(ids_);
  size_t end = complete_utf8_prefix(text);
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  if (end == text.size() && std::string_view(text).ends_with(kReplacement))
    end -= kReplacement.size();
  emit(text, end);
}

void TextStream::finish() {
  const std::string text = tok_.decode(ids_);
  emit(text, text.size());
}

void TextStream::emit(const std::string& text, size_t end) {
  if (end <= written_) return;
  write_(std::string_view(text).substr(written_, end - written_));
  written_ = end;
}

}  // namespace moet
