#include "data/tokenizer.h"

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"

namespace moet {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec.empty() || spec == "byte") return std::make_unique<ByteTokenizer>();
  return BpeTokenizer::from_file(spec);
}

}  // namespace moet
