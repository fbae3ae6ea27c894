// The tokenizer interface every part of moet uses (data preparation, on-the-fly text datasets,
// generation, evaluation): text to token ids and back. Implementations: ByteTokenizer (one token
// per byte, the built-in default) and the byte-level BPE of a Hugging Face tokenizer.json.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moet {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Number of token ids (the model's vocab_size must be at least this).
  virtual int64_t vocab_size() const = 0;
  // One line for logs: what the tokenizer is.
  virtual std::string describe() const = 0;
  // The end-of-document token appended after every document of a dataset.
  virtual int32_t eod_id() const = 0;

  // Appends the ids of `text` to `out`: the text as it stands, special tokens written in the text
  // recognised, no BOS/EOS added.
  virtual void encode_append(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> out;
    encode_append(text, out);
    return out;
  }
  // Frames the ids of one text as the tokenizer's post-processor does when Hugging Face's
  // encode(text, add_special_tokens=True) runs (e.g. a BOS in front); nothing by default.
  virtual void add_special_tokens(std::vector<int32_t>& ids) const { (void)ids; }
  // encode(text), framed by add_special_tokens when `add_special`.
  std::vector<int32_t> encode(std::string_view text, bool add_special) const {
    std::vector<int32_t> out = encode(text);
    if (add_special) add_special_tokens(out);
    return out;
  }
  // The text of `ids` (special tokens written out as their text). Throws moet::Error for an id
  // outside [0, vocab_size()).
  virtual std::string decode(const int32_t* ids, int64_t n) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(ids.data(), static_cast<int64_t>(ids.size()));
  }
};

// "byte" (or empty): the byte tokenizer; otherwise the path of a tokenizer.json.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace moet
