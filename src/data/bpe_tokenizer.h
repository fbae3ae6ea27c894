// The byte-level BPE tokenizer of a Hugging Face tokenizer.json (GPT-2, Llama 3, Qwen 2,
// DeepSeek-V3 style): added tokens split out of the text, the pre-tokenizer's regex splits, BPE
// merges by rank within each word, the post-processor's BOS/EOS on request; decode as the
// ByteLevel decoder does. Encodes and decodes exactly as Hugging Face `tokenizers` does for what
// it supports (docs/tokenizer.md) and refuses the rest with one line. Once loaded it is
// read-only: encode and decode may run on many threads at once (each thread keeps its own word
// cache and merge scratch).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace moet {

class BpeTokenizer : public Tokenizer {
 public:
  // Reads a tokenizer.json. Throws moet::Error (one line naming the file and what is wrong or
  // unsupported).
  static std::unique_ptr<BpeTokenizer> from_file(const std::string& path);
  // The same from the file's text; `where` names it in errors.
  static std::unique_ptr<BpeTokenizer> from_json_text(std::string_view text,
                                                      const std::string& where);
  ~BpeTokenizer() override;

  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  std::string describe() const override;
  // The end-of-document token (docs/tokenizer.md: how it is chosen); throws moet::Error when the
  // tokenizer has none.
  int32_t eod_id() const override;
  std::optional<int32_t> find_eod() const { return eod_; }
  // The post-processor's BOS (the special token before the text in its template), if any.
  std::optional<int32_t> bos_id() const { return bos_; }

  using Tokenizer::decode;
  using Tokenizer::encode;
  // Text to ids: invalid UTF-8 is first replaced by U+FFFD (docs/tokenizer.md), added tokens
  // written in the text are recognised, no BOS/EOS.
  void encode_append(std::string_view text, std::vector<int32_t>& out) const override;
  void add_special_tokens(std::vector<int32_t>& ids) const override;
  // Ids to text as tokenizers' decode(ids, skip_special_tokens=False): every token's
  // byte-level spelling becomes bytes (a spelling with a character outside the byte-level
  // alphabet, e.g. "<｜end▁of▁sentence｜>", is taken as its own UTF-8), then the whole is UTF-8
  // with invalid sequences replaced by U+FFFD. Ids outside [0, vocab_size()) throw; ids inside
  // it that name no token are skipped, as tokenizers does.
  std::string decode(const int32_t* ids, int64_t n) const override;

  // The id of a token as tokenizer.json spells it (byte-level spelling or added token's text).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The spelling of an id in tokenizer.json ("" when the id names no token).
  std::string id_to_token(int32_t id) const;

 private:
  struct AddedToken {
    std::string content;
    std::string match;  // what is matched: the content, NFC'd when normalized under NFC
    int32_t id = 0;
    bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
  };
  // Added tokens matched leftmost-longest, as tokenizers' Aho-Corasick set does.
  struct AddedSet {
    std::vector<int32_t> by_first[256];  // indices into added_, longest first
    bool empty = true;
  };
  struct PairTable;

  BpeTokenizer() = default;
  void load(const nlohmann::json& j, const std::string& where);
  void load_model(const nlohmann::json& m, const std::string& where);
  void load_added(const nlohmann::json& a, const std::string& where);
  void load_post_processor(const nlohmann::json& p, const std::string& where);
  void pick_special_ids();
  // Splits `text` on the tokens of `set` (pass 0: not normalized, 1: normalized), then passes
  // the gaps on to the next pass or the pre-tokenizer.
  void split_added(std::string_view text, int pass, std::vector<int32_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;

  std::string where_;
  std::vector<std::string> tokens_;                 // id -> tokenizer.json spelling ("" for none)
  std::vector<std::string> bytes_;                  // id -> the bytes a model token decodes to
  std::vector<uint8_t> kind_;                       // id -> 0 none, 1 model token, 2 added token
  std::unordered_map<std::string, int32_t> vocab_;  // raw bytes -> id of model tokens
  std::unordered_map<std::string, int32_t> added_by_content_;
  int32_t byte_id_[256];
  std::unique_ptr<PairTable> pairs_;
  size_t n_merges_ = 0;
  int32_t unk_ = -1;
  bool fuse_unk_ = false, ignore_merges_ = false;
  bool nfc_ = false;  // the normalizer is NFC
  std::vector<AddedToken> added_;
  AddedSet sets_[2];
  std::optional<PreTokenizer> pre_;
  std::vector<int32_t> prefix_, suffix_;  // the post-processor's ids around a single sequence
  std::optional<int32_t> eod_, bos_;
  uint64_t serial_ = 0;  // keys the per-thread word cache
};

}  // namespace moet
