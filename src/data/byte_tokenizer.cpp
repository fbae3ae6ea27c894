#include "data/byte_tokenizer.h"

#include "core/error.h"

namespace moet {

void ByteTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
}

std::string ByteTokenizer::decode(const int32_t* ids, int64_t n, std::string_view eod_text) const {
  std::string s;
  s.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id == kEod) {
      s.append(eod_text);
      continue;
    }
    MOET_CHECK(id >= 0 && id < 256, "token id ", id, " at position ", i,
               " is outside the byte tokenizer's vocabulary [0, 256]");
    s.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return s;
}

}  // namespace moet
