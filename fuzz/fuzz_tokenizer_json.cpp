// libFuzzer target: the tokenizer.json loader (src/data/bpe_tokenizer.h) on arbitrary bytes. A
// moet::Error is the expected rejection. A tokenizer the loader accepts must then encode a fixed
// set of texts (invalid UTF-8, special-token look-alikes, long whitespace and digit runs
// included) to ids inside [0, vocab_size()), the same with add_special_tokens framing them,
// decode those ids to valid UTF-8, and give the same ids on a second encode (the word cache).
// Anything else (a crash, a sanitizer report, another exception, a hang, or a broken invariant,
// which aborts naming it) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/text_bytes.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "tokenizer.json fuzz finding: %s\n", what.c_str());
  std::abort();
}

const char* const kTexts[] = {
    "Hello world's 12345 !!  \n\n\ttabs",
    "<|endoftext|> <s></s>[MASK] <|end_of_text|>x",
    "Caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA6 \xD0\x96",
    "bad \xFF\xFE utf8 \xE2\x82 cut \xED\xA0\x80",
    "                                                                        x",
    "0000000000000000000000000000000000000000000000000000000000000000000000000",
    "",
};

void check(const moet::BpeTokenizer& t) {
  const int64_t v = t.vocab_size();
  if (v <= 0) finding("an accepted tokenizer has no ids");
  for (const char* text : kTexts) {
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= v) finding("encode gave id " + std::to_string(id) + " outside the vocab");
    if (t.encode(text) != ids) finding("a second encode of the same text differs");
    std::vector<int32_t> framed = t.encode(text, true);
    for (int32_t id : framed)
      if (id < 0 || id >= v)
        finding("framing gave id " + std::to_string(id) + " outside the vocab");
    const std::string back = t.decode(ids);
    if (moet::utf8_valid_prefix(back) != back.size()) finding("decode gave invalid UTF-8");
  }
  if (const auto eod = t.find_eod(); eod && (*eod < 0 || *eod >= v)) finding("eod outside vocab");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<moet::BpeTokenizer> t;
  try {
    t = moet::BpeTokenizer::from_json_text(
        std::string_view(reinterpret_cast<const char*>(data), size), "tokenizer 'fuzz'");
  } catch (const moet::Error&) {
    return 0;
  }
  try {
    check(*t);
  } catch (const moet::Error& e) {
    // Only a regex that gives up (PCRE2's match limit on a pathological pattern) may throw.
    if (std::string(e.what()).find("tokenizer regex failed") == std::string::npos)
      finding(std::string("an accepted tokenizer threw: ") + e.what());
  }
  return 0;
}
