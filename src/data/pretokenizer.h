// The pre-tokenizer of a byte-level BPE tokenizer.json: regex splits (Split, Digits, the GPT-2
// regex of ByteLevel) run by PCRE2's JIT, cutting text into the words BPE merges within
// (docs/tokenizer.md says why PCRE2 and what is supported).
#pragma once
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moet {

// A compiled PCRE2 pattern (UTF, Unicode properties, JIT); safe to use from many threads.
class Regex {
 public:
  // Throws moet::Error naming `where` when the pattern does not compile. `literal`: the
  // pattern is a plain string.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // The first match in `s` starting at or after byte `from` (s valid UTF-8, `from` on a character
  // boundary): false when none, else [begin, end).
  bool find(std::string_view s, size_t from, size_t& begin, size_t& end) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// The GPT-2 split regex of the ByteLevel pre-tokenizer.
extern const char* const kGpt2SplitRegex;

// Calls of a callable without owning it (the pre-tokenizer's sink of words).
class WordSink {
 public:
  template <typename F>
  WordSink(F& f)  // NOLINT: implicit by design
      : obj_(&f), call_([](void* o, std::string_view w) { (*static_cast<F*>(o))(w); }) {}
  void operator()(std::string_view w) const { call_(obj_, w); }

 private:
  void* obj_;
  void (*call_)(void*, std::string_view);
};

class PreTokenizer {
 public:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

  // From tokenizer.json's "pre_tokenizer": Split / Digits steps (any number, in a Sequence)
  // followed by exactly one ByteLevel. Throws moet::Error naming `where` and what is not
  // supported.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);
  // ByteLevel with the GPT-2 regex and no prefix space (what `moet tokenizer train` writes).
  static PreTokenizer gpt2();

  // Cuts `text` (valid UTF-8) into non-empty words, in order, each passed to `sink` (raw bytes;
  // the byte-level mapping is left to the model).
  void split(std::string_view text, WordSink sink) const;

 private:
  struct Step {
    std::shared_ptr<Regex> regex;  // null: no split (ByteLevel without its regex)
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel's
  };
  // `prefixed`: ByteLevel's prefix space is already there.
  void run(size_t step, std::string_view text, WordSink sink, bool prefixed = false) const;
  static void parse(const nlohmann::json& j, const std::string& where, std::vector<Step>& steps,
                    bool& byte_level);
  std::vector<Step> steps_;
};

}  // namespace moet
