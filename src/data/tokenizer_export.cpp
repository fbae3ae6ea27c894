#include "data/tokenizer_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "data/byte_tokenizer.h"
#include "data/tokenizer.h"

namespace moet {

namespace {

using nlohmann::ordered_json;

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest are shifted to
// code points from 256 up (what a ByteLevel pre-tokenizer maps bytes to).
std::string byte_as_unicode(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      const bool p = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
      n += !p;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

ordered_json special_token(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// The byte tokenizer as a tokenizer.json: byte b is id b, the end of document id 256.
std::string byte_tokenizer_json() {
  ordered_json vocab = ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_as_unicode(b)] = b;
  ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = ordered_json::array({special_token(ByteTokenizer::kEod, "<|endoftext|>")});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  j["post_processor"] = nullptr;
  j["decoder"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},          {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},      {"byte_fallback", false},      {"ignore_merges", false},
                {"vocab", vocab},         {"merges", ordered_json::array()}};
  return j.dump(2) + "\n";
}

}  // namespace

ExportedTokenizer export_hf_tokenizer(const std::string& spec, const std::string& out_dir,
                                      int64_t max_positions) {
  namespace fs = std::filesystem;
  const bool bytes = spec.empty() || spec == "byte";
  const std::string text = bytes ? byte_tokenizer_json() : read_text_file(spec);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(spec.empty() ? "byte" : spec);
  ExportedTokenizer r;
  r.eos_id = tok->eod_id();
  // the eos token's text: the added token with that id
  const ordered_json j = ordered_json::parse(text, nullptr, false);
  MOET_CHECK(j.is_object(), spec, ": not a tokenizer.json object");
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t.contains("content")) continue;
      const std::string content = t["content"].get<std::string>();
      if (t["id"] == r.eos_id) r.eos_token = content;
      if (content == "<|pad|>") r.pad_token = content;
    }
  MOET_CHECK(!r.eos_token.empty(), spec, ": the end-of-document token (id ", r.eos_id,
             ") is no added token; transformers could not name it");
  if (r.pad_token.empty()) r.pad_token = r.eos_token;
  r.description = bytes ? "the byte tokenizer as a byte-level BPE without merges" : spec;
  const ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                               {"bos_token", r.eos_token},
                               {"eos_token", r.eos_token},
                               {"pad_token", r.pad_token},
                               {"unk_token", nullptr},
                               {"model_max_length", max_positions},
                               {"clean_up_tokenization_spaces", false},
                               {"add_bos_token", false},
                               {"add_eos_token", false}};
  write_file_atomically((fs::path(out_dir) / "tokenizer.json").string(), text, true, true);
  write_file_atomically((fs::path(out_dir) / "tokenizer_config.json").string(),
                        config.dump(2) + "\n", true, true);
  return r;
}

}  // namespace moet
