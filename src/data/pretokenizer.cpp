#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace moet {

const char* const kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// Per-thread match state: one match-data block and a JIT stack larger than the default 32 KB
// (long runs of one class, e.g. a megabyte of spaces, must not fail to match).
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (!data || !stack || !context) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState s;
  return s;
}

size_t utf8_char_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

PreTokenizer::Behavior parse_behavior(const nlohmann::json& j, const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return PreTokenizer::Behavior::kRemoved;
  if (b == "Isolated") return PreTokenizer::Behavior::kIsolated;
  if (b == "MergedWithPrevious") return PreTokenizer::Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return PreTokenizer::Behavior::kMergedWithNext;
  if (b == "Contiguous") return PreTokenizer::Behavior::kContiguous;
  throw Error(where + ": Split behavior " + j.dump() +
              " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  MOET_CHECK(j[key].is_boolean(), where, ": '", key, "' must be true or false");
  return j[key].get<bool>();
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL admits no UCP (a literal needs no classes).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error(str(where, ": regex ", nlohmann::json(pattern).dump(),
                    " does not compile at offset ", offset, ": ",
                    reinterpret_cast<const char*>(msg)));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view s, size_t from, size_t& begin, size_t& end) const {
  MatchState& st = match_state();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const int rc =
      jit_ ? pcre2_jit_match(code, subject, s.size(), from, 0, st.data, st.context)
           : pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    throw Error(str("tokenizer regex failed on a text of ", s.size(),
                    " bytes: ", reinterpret_cast<const char*>(msg)));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

PreTokenizer PreTokenizer::gpt2() {
  PreTokenizer p;
  Step s;
  s.regex = std::make_shared<Regex>(kGpt2SplitRegex, false, "the GPT-2 regex");
  p.steps_.push_back(std::move(s));
  return p;
}

void PreTokenizer::parse(const nlohmann::json& j, const std::string& where,
                         std::vector<Step>& steps, bool& byte_level) {
  MOET_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
             ": pre_tokenizer must be an object with a \"type\"");
  const std::string type = j["type"].get<std::string>();
  MOET_CHECK(!byte_level, where, ": pre_tokenizer ", type,
             " after ByteLevel is not supported (moet needs ByteLevel as the last step)");
  const std::string at = where + ": pre_tokenizer " + type;
  if (type == "Sequence") {
    MOET_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), at,
               " needs a \"pretokenizers\" array");
    for (const auto& p : j["pretokenizers"]) parse(p, where, steps, byte_level);
    return;
  }
  // Words pass the steps recursively: a bound keeps a hostile file from exhausting the stack.
  MOET_CHECK(steps.size() < 64, where, ": more than 64 pre-tokenizer steps");
  Step s;
  if (type == "ByteLevel") {
    s.add_prefix_space = get_bool(j, "add_prefix_space", true, at);
    if (get_bool(j, "use_regex", true, at))
      s.regex = std::make_shared<Regex>(kGpt2SplitRegex, false, at);
    byte_level = true;
  } else if (type == "Split") {
    MOET_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].size() == 1, at,
               ": \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
    const auto& p = *j["pattern"].begin();
    const std::string kind = j["pattern"].begin().key();
    MOET_CHECK((kind == "Regex" || kind == "String") && p.is_string(), at,
               ": \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
    s.regex = std::make_shared<Regex>(p.get<std::string>(), kind == "String", at);
    MOET_CHECK(j.contains("behavior"), at, " needs a \"behavior\"");
    s.behavior = parse_behavior(j["behavior"], at);
    s.invert = get_bool(j, "invert", false, at);
  } else if (type == "Digits") {
    // Rust's char::is_numeric is the N categories: runs of them, or each alone.
    const bool each = get_bool(j, "individual_digits", false, at);
    s.regex = std::make_shared<Regex>(each ? "\\p{N}" : "\\p{N}+", false, at);
  } else {
    throw Error(at + " is not supported (supported: ByteLevel, Split, Digits, Sequence)");
  }
  steps.push_back(std::move(s));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  MOET_CHECK(!j.is_null(), where,
             ": pre_tokenizer is null; moet supports byte-level BPE only (a ByteLevel "
             "pre-tokenizer)");
  PreTokenizer p;
  bool byte_level = false;
  parse(j, where, p.steps_, byte_level);
  MOET_CHECK(byte_level, where,
             ": the pre_tokenizer has no ByteLevel step; moet supports byte-level BPE only");
  return p;
}

void PreTokenizer::split(std::string_view text, WordSink sink) const {
  if (!text.empty()) run(0, text, sink);
}

void PreTokenizer::run(size_t step, std::string_view text, WordSink sink, bool prefixed) const {
  if (step == steps_.size()) {
    sink(text);
    return;
  }
  const Step& s = steps_[step];
  auto next = [&](std::string_view piece) {
    if (!piece.empty()) run(step + 1, piece, sink);
  };
  if (s.add_prefix_space && !prefixed && text[0] != ' ') {
    std::string spaced;
    spaced.reserve(text.size() + 1);
    spaced += ' ';
    spaced += text;
    run(step, spaced, sink, true);  // the words point into `spaced`, consumed before it goes
    return;
  }
  if (!s.regex) {
    next(text);
    return;
  }
  // Matches as (begin, end) with the text between them as non-matches, like tokenizers'
  // Pattern::find_matches; an empty match moves the search on by one character.
  const bool stream = s.behavior == Behavior::kIsolated || s.behavior == Behavior::kRemoved;
  struct Piece {
    size_t b, e;
    bool match;
  };
  std::vector<Piece> pieces;
  auto piece = [&](size_t b, size_t e, bool match) {
    if (s.invert) match = !match;
    if (stream) {
      if (s.behavior == Behavior::kIsolated || !match) next(text.substr(b, e - b));
    } else {
      pieces.push_back({b, e, match});
    }
  };
  size_t prev = 0, from = 0, mb = 0, me = 0;
  while (from <= text.size() && s.regex->find(text, from, mb, me)) {
    if (mb > prev) piece(prev, mb, false);
    piece(mb, me, true);
    prev = me;
    from = me > mb ? me : me + (me < text.size() ? utf8_char_len(text[me]) : 1);
  }
  if (prev < text.size()) piece(prev, text.size(), false);
  if (stream) return;
  // The merging behaviours fold the pieces as tokenizers' NormalizedString::split does.
  std::vector<std::pair<size_t, size_t>> out;
  bool previous = false;
  if (s.behavior == Behavior::kMergedWithNext) {
    for (size_t i = pieces.size(); i-- > 0;) {
      const Piece& p = pieces[i];
      if (p.match && !previous && !out.empty())
        out.back().first = p.b;
      else
        out.push_back({p.b, p.e});
      previous = p.match;
    }
    for (size_t i = out.size(); i-- > 0;)
      next(text.substr(out[i].first, out[i].second - out[i].first));
    return;
  }
  for (const Piece& p : pieces) {
    const bool merge =
        s.behavior == Behavior::kContiguous ? p.match == previous : (p.match && !previous);
    if (merge && !out.empty())
      out.back().second = p.e;
    else
      out.push_back({p.b, p.e});
    previous = p.match;
  }
  for (const auto& [b, e] : out) next(text.substr(b, e - b));
}

}  // namespace moet
