// Byte-level BPE tokenizer (src/data/bpe_tokenizer.h): the byte-level alphabet, UTF-8 repair,
// merges by rank, added tokens, post-processor, decode, the trainer, and the one-line errors for
// what is malformed or unsupported. tests/tokenizer_interop.py compares with tokenizers itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "data/bpe_tokenizer.h"
#include "data/bpe_trainer.h"
#include "data/pretokenizer.h"
#include "data/text_bytes.h"
#include "error_of.h"

namespace moet {
namespace {

using nlohmann::json;
using test::error_of;

// A tiny GPT-2 style tokenizer.json: the bytes of "abc !" and " ", merges a+b, ab+c, b+c.
json tiny(json merges = json::array({"a b", "ab c", "b c"})) {
  json vocab = {{"a", 0}, {"b", 1},  {"c", 2},   {"\xC4\xA0", 3},  // "Ġ" is the space
                {"!", 4}, {"ab", 5}, {"abc", 6}, {"bc", 7},       {"<|endoftext|>", 8}};
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 8},
         {"content", "<|endoftext|>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::unique_ptr<BpeTokenizer> load(const json& j) {
  return BpeTokenizer::from_json_text(j.dump(), "tokenizer 'test.json'");
}

std::vector<int32_t> ids(std::initializer_list<int32_t> l) { return l; }

TEST(TextBytes, ByteLevelAlphabet) {
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_unicode('!'), uint32_t('!'));
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);  // the soft hyphen is not printable
  EXPECT_EQ(byte_to_unicode(0xFF), 0xFFu);
  std::string all;
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_from_unicode(byte_to_unicode(static_cast<uint8_t>(b))), b);
    all.push_back(static_cast<char>(b));
  }
  std::string back;
  ASSERT_TRUE(byte_level_to_bytes(bytes_to_byte_level(all), back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(bytes_to_byte_level(" hi\n"), "\xC4\xA0hi\xC4\x8A");
  EXPECT_FALSE(byte_level_to_bytes("\xE4\xB8\xAD", back));  // 中 is not in the alphabet
}

TEST(TextBytes, InvalidUtf8BecomesReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_replace_invalid("ok"), "ok");
  EXPECT_EQ(utf8_replace_invalid("a\xFF"
                                 "b"),
            "a" + r + "b");
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82"), r);              // a cut 3-byte sequence: one
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), r + r + r);  // a surrogate: one per byte
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), r + r);          // overlong
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98"
                                 "x"),
            r + "x");  // a cut emoji
  EXPECT_EQ(utf8_valid_prefix("abc\xE2\x82\xAC\xFF"), 6u);
}

TEST(TextBytes, Nfc) {
  EXPECT_EQ(nfc("Cafe\xCC\x81"), "Caf\xC3\xA9");                   // e + combining acute -> é
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                      // the Angstrom sign -> Å
  EXPECT_EQ(nfc("plain ascii \xC3\xA9"), "plain ascii \xC3\xA9");  // already NFC
}

TEST(BpeTokenizer, NfcNormalizer) {
  json j = tiny();
  j["model"]["vocab"]["\xC3\x83"] = 9;   // byte 0xC3 (spelled Ã)
  j["model"]["vocab"]["\xC2\xA1"] = 10;  // byte 0xA1 (spelled ¡)
  j["model"]["vocab"]["\xC3\x8C"] = 11;  // byte 0xCC (spelled Ì)
  const auto plain = load(j);
  j["normalizer"] = {{"type", "NFC"}};
  const auto t = load(j);
  // a + U+0301 is composed to á (C3 A1) first; without NFC its bytes are 61 CC 81 (0x81 is not
  // in this vocab, so it is dropped).
  EXPECT_EQ(t->encode("a\xCC\x81"), ids({9, 10}));
  EXPECT_EQ(t->encode("\xC3\xA1"), ids({9, 10}));
  EXPECT_EQ(plain->encode("a\xCC\x81"), ids({0, 11}));
}

TEST(PreTokenizer, Gpt2Split) {
  const PreTokenizer p = PreTokenizer::gpt2();
  std::vector<std::string> words;
  auto sink = [&](std::string_view w) { words.emplace_back(w); };
  p.split("Hello world's  12 !!\n\n", sink);
  EXPECT_EQ(words, (std::vector<std::string>{"Hello", " world", "'s", " ", " 12", " !!", "\n\n"}));
}

TEST(BpeTokenizer, MergesByRank) {
  const auto t = load(tiny());
  EXPECT_EQ(t->encode("abc"), ids({6}));  // a+b first (rank 0), then ab+c
  EXPECT_EQ(t->encode("bc"), ids({7}));
  EXPECT_EQ(t->encode("cab"), ids({2, 5}));
  EXPECT_EQ(t->encode("abc abc!"), ids({6, 3, 6, 4}));
  EXPECT_EQ(t->encode("abcbc"), ids({6, 7}));
  EXPECT_EQ(t->vocab_size(), 9);
  // Merges written as pairs mean the same.
  const auto pairs = load(tiny(json::array({{"a", "b"}, {"ab", "c"}, {"b", "c"}})));
  EXPECT_EQ(pairs->encode("abc abcbc!"), t->encode("abc abcbc!"));
  // A different rank order gives b+c first: a, bc.
  const auto other = load(tiny(json::array({"b c", "a b", "ab c"})));
  EXPECT_EQ(other->encode("abc"), ids({0, 7}));
  // Each tokenizer has its own word cache: alternating between them keeps both right.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t->encode("abc"), ids({6}));
    EXPECT_EQ(other->encode("abc"), ids({0, 7}));
  }
  // Bytes outside the vocab are dropped (no unk token) before merging, as tokenizers does.
  EXPECT_EQ(t->encode("axb"), ids({5}));
}

TEST(BpeTokenizer, AddedTokensAndEod) {
  const auto t = load(tiny());
  EXPECT_EQ(t->eod_id(), 8);
  EXPECT_EQ(t->encode("ab<|endoftext|>c"), ids({5, 8, 2}));
  EXPECT_EQ(t->encode("<|endoftext|><|endoftext|>"), ids({8, 8}));
  EXPECT_EQ(t->encode("<|endoftext"), t->encode(std::string("<|endoftext")));
  EXPECT_EQ(t->decode(ids({5, 8, 2})), "ab<|endoftext|>c");
  EXPECT_EQ(t->token_to_id("\xC4\xA0"), 3);
  EXPECT_EQ(t->id_to_token(8), "<|endoftext|>");

  // Longest match first; lstrip/rstrip take the spaces around.
  json j = tiny();
  j["added_tokens"].push_back({{"id", 9}, {"content", "<a>"}, {"special", true}});
  j["added_tokens"].push_back({{"id", 10}, {"content", "<a>b"}, {"special", true}});
  j["added_tokens"].push_back(
      {{"id", 11}, {"content", "[M]"}, {"special", true}, {"lstrip", true}, {"rstrip", true}});
  const auto u = load(j);
  EXPECT_EQ(u->encode("<a>bc"), ids({10, 2}));
  EXPECT_EQ(u->encode("<a>c"), ids({9, 2}));
  EXPECT_EQ(u->encode("a  [M]  b"), ids({0, 11, 1}));
  EXPECT_EQ(u->vocab_size(), 12);
}

TEST(BpeTokenizer, PostProcessorTemplate) {
  json j = tiny();
  j["added_tokens"].push_back({{"id", 9}, {"content", "<s>"}, {"special", true}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {9}}, {"tokens", {"<s>"}}}}}}};
  const auto t = load(j);
  EXPECT_EQ(t->encode("abc", true), ids({9, 6}));
  EXPECT_EQ(t->encode("abc", false), ids({6}));
  EXPECT_EQ(t->bos_id(), 9);
}

TEST(BpeTokenizer, DecodeReplacesInvalidUtf8AndChecksIds) {
  json j = tiny();
  j["model"]["vocab"]["\xC3\xA2"] = 9;  // â: byte 0xE2, the first of a 3-byte character
  const auto t = load(j);
  EXPECT_EQ(t->decode(ids({9, 0})),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_NE(error_of([&] { t->decode(ids({10})); }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t->decode(ids({-1})); }).find("outside the vocabulary"),
            std::string::npos);
  // Invalid UTF-8 input is encoded as its U+FFFD replacement.
  EXPECT_EQ(t->encode("a\xFF"), t->encode("a\xEF\xBF\xBD"));
}

TEST(BpeTokenizer, EodMissingIsOneLine) {
  json j = tiny();
  j["added_tokens"] = json::array();
  const auto t = load(j);
  EXPECT_FALSE(t->find_eod().has_value());
  EXPECT_NE(error_of([&] { t->eod_id(); }).find("has no end-of-document token"), std::string::npos);
}

std::string load_error(const json& j) {
  return error_of([&] { load(j); });
}

TEST(BpeTokenizer, RefusesWhatItDoesNotSupport) {
  json j = tiny();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(load_error(j).find("test.json': model type WordPiece is not supported"),
            std::string::npos);
  j["model"]["type"] = "Unigram";
  EXPECT_NE(load_error(j).find("model type Unigram is not supported"), std::string::npos);
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(load_error(j).find("pre_tokenizer Whitespace is not supported"), std::string::npos);
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  EXPECT_NE(load_error(j).find("after ByteLevel is not supported"), std::string::npos);
  j = tiny();
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(load_error(j).find("normalizer NFKC is not supported"), std::string::npos);
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  EXPECT_NE(load_error(j).find("normalizer Lowercase is not supported"), std::string::npos);
  j = tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(load_error(j).find("decoder WordPiece is not supported"), std::string::npos);
  j = tiny();
  j["model"]["byte_fallback"] = true;
  EXPECT_NE(load_error(j).find("byte_fallback is not supported"), std::string::npos);
  j = tiny();
  j["model"]["merges"].push_back("a x");
  EXPECT_NE(load_error(j).find("merge #3 \"a x\" uses a token that is not in the vocab"),
            std::string::npos);
  j = tiny();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(load_error(j).find("does not compile"), std::string::npos);
}

TEST(BpeTokenizer, MalformedOrMissingFile) {
  EXPECT_NE(error_of([] {
              BpeTokenizer::from_json_text("{\"model\": ", "tokenizer 'x.json'");
            }).find("tokenizer 'x.json': not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              BpeTokenizer::from_json_text("[1, 2]", "tokenizer 'x.json'");
            }).find("must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              load_tokenizer("/nonexistent/tokenizer.json");
            }).find("tokenizer '/nonexistent/tokenizer.json': no such file"),
            std::string::npos);
  EXPECT_EQ(load_tokenizer("byte")->vocab_size(), 257);
}

TEST(BpeTrainer, TrainsALoadableDeterministicTokenizer) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the cat sat on the mat; the hat is flat. <|endoftext|>\n";
  BpeTrainOptions o;
  o.vocab_size = 2 + 256 + 10;
  o.threads = 2;
  BpeTrainStats st;
  const std::string a = train_bpe({text}, o, &st);
  EXPECT_EQ(a, train_bpe({text}, o));
  EXPECT_EQ(st.merges, 10);
  const auto t = BpeTokenizer::from_json_text(a, "trained");
  EXPECT_EQ(t->vocab_size(), 268);
  EXPECT_EQ(t->eod_id(), 0);
  EXPECT_EQ(t->token_to_id("<|pad|>"), 1);
  const auto e = t->encode(" the cat sat on the mat");
  EXPECT_LT(e.size(), 23u);  // fewer tokens than bytes
  EXPECT_EQ(t->decode(e), " the cat sat on the mat");
  const std::string odd = "unseen Ünïcødé 🙂 \xFF";
  EXPECT_EQ(t->decode(t->encode(odd)), utf8_replace_invalid(odd));
  // The most frequent pairs are merged first: "at" (6 words hold it), then "he".
  EXPECT_EQ(t->token_to_id("at"), 258);
  EXPECT_EQ(t->token_to_id("he"), 259);
  // All merges used up: 13 distinct words become 13 tokens after 19 merges.
  o.vocab_size = 400;
  EXPECT_EQ(BpeTokenizer::from_json_text(train_bpe({text}, o), "all")->vocab_size(), 277);
  o.vocab_size = 100;
  EXPECT_NE(error_of([&] { train_bpe({text}, o); }).find("smaller than"), std::string::npos);
}

TEST(BpeTrainer, WritesAtomicallyAndRefusesToOverwrite) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "moet_test_tokenizer.json").string();
  std::filesystem::remove(path);
  write_file_atomically(path, "{}", false);
  EXPECT_NE(
      error_of([&] { write_file_atomically(path, "{}", false); }).find("already exists; refusing"),
      std::string::npos);
  write_file_atomically(path, "{\"x\": 1}", true);
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(s, "{\"x\": 1}");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moet
