#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_depth_limit.h"
#include "data/text_bytes.h"

namespace moet {

namespace {

// Ids are capped so a hostile file cannot make moet allocate gigabytes for one id (real
// vocabularies have at most a few hundred thousand).
constexpr int64_t kMaxId = (int64_t{1} << 21) - 1;

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
  return h ^ (h >> 29);
}

// Per-thread cache of word -> ids for one tokenizer (the serial tells tokenizers apart).
class WordCache {
 public:
  uint64_t owner() const { return owner_; }
  void reset(uint64_t owner) {
    owner_ = owner;
    table_.assign(size_t{1} << 17, Entry{0, 0, 0, 0, 0});
    mask_ = table_.size() - 1;
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }
  static constexpr size_t kMaxWord = 256;
  const int32_t* find(std::string_view w, uint64_t h, uint32_t& n) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Entry& e = table_[i];
      if (e.key_len == 0) return nullptr;
      if (e.hash == h && e.key_len - 1 == w.size() &&
          std::memcmp(keys_.data() + e.key_off, w.data(), w.size()) == 0) {
        n = e.ids_len;
        return ids_.data() + e.ids_off;
      }
    }
  }
  void insert(std::string_view w, uint64_t h, const int32_t* ids, uint32_t n) {
    if (used_ * 2 >= table_.size() || keys_.size() > (64u << 20)) reset(owner_);
    size_t i = h & mask_;
    while (table_[i].key_len != 0) i = (i + 1) & mask_;
    table_[i] = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(w.size() + 1),
                 static_cast<uint32_t>(ids_.size()), n};
    keys_.append(w);
    ids_.insert(ids_.end(), ids, ids + n);
    ++used_;
  }

 private:
  struct Entry {
    uint64_t hash;
    uint32_t key_off, key_len;  // key_len 0: empty slot, else length + 1
    uint32_t ids_off, ids_len;
  };
  uint64_t owner_ = 0;
  std::vector<Entry> table_;
  size_t mask_ = 0, used_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// The word caches of this thread: one per tokenizer for the last few tokenizers used, so that
// alternating between two tokenizers does not clear a cache at every call.
WordCache& word_cache(uint64_t owner) {
  constexpr int kCaches = 4;
  thread_local WordCache caches[kCaches];
  thread_local uint64_t last_use[kCaches] = {};
  thread_local uint64_t clock = 0;
  int pick = 0;
  for (int i = 0; i < kCaches; ++i) {
    if (caches[i].owner() == owner) {
      last_use[i] = ++clock;
      return caches[i];
    }
    if (last_use[i] < last_use[pick]) pick = i;
  }
  caches[pick].reset(owner);
  last_use[pick] = ++clock;
  return caches[pick];
}

// The per-thread scratch of one BPE merge.
struct MergeScratch {
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Merge {
    int32_t rank, pos, new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Merge> heap;
  std::vector<int32_t> ids;
};

// Lowest rank first, then leftmost (tokenizers' merge queue order).
bool later(const MergeScratch::Merge& a, const MergeScratch::Merge& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

bool is_white_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The code point that ends at s[end) (s valid UTF-8, end > 0), and its start.
uint32_t char_before(std::string_view s, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  uint32_t cp = static_cast<uint8_t>(s[start]);
  const size_t n = end - start;
  if (n > 1) cp &= (0xFF >> (n + 1));
  for (size_t k = start + 1; k < end; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[k]) & 0x3F);
  return cp;
}

uint32_t char_at(std::string_view s, size_t i, size_t& len) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : (b & (0xFF >> (len + 1)));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// Whether a word character ends / starts the text (Unicode \w, for single_word tokens).
bool word_char_at_end(std::string_view s) {
  static const Regex re("\\w\\z", false, "single_word");
  size_t b, e, start;
  if (s.empty()) return false;
  char_before(s, s.size(), start);
  return re.find(s, start, b, e);
}
bool word_char_at_start(std::string_view s) {
  static const Regex re("\\A\\w", false, "single_word");
  size_t b, e;
  return !s.empty() && re.find(s, 0, b, e);
}

std::atomic<uint64_t> next_serial{1};

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null;
  return j.is_object() && j.contains(key) ? j[key] : null;
}

bool flag(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  const auto& v = field(j, key);
  if (v.is_null()) return fallback;
  MOET_CHECK(v.is_boolean(), where, ": '", key, "' must be true or false");
  return v.get<bool>();
}

int32_t checked_id(const nlohmann::json& v, const std::string& where, const std::string& what) {
  MOET_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxId, where,
             ": ", what, " has id ", v.dump(), ", not an integer in [0, ", kMaxId, "]");
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

// Merge rules: (left id, right id) -> (rank, merged id), open addressing.
struct BpeTokenizer::PairTable {
  struct Slot {
    uint64_t key = ~uint64_t{0};
    int32_t rank = 0, new_id = 0;
  };
  std::vector<Slot> slots;
  size_t mask = 0;
  explicit PairTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) {
    k *= 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(k ^ (k >> 31));
  }
  // A later rule for the same pair replaces the earlier one (as tokenizers' map does).
  void set(int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    const uint64_t k = key(a, b);
    size_t i = hash(k) & mask;
    while (slots[i].key != ~uint64_t{0} && slots[i].key != k) i = (i + 1) & mask;
    slots[i] = {k, rank, new_id};
  }
  const Slot* get(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == ~uint64_t{0}) return nullptr;
    }
  }
};

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_file(const std::string& path) {
  std::error_code ec;
  MOET_CHECK(std::filesystem::is_regular_file(path, ec), "tokenizer '", path,
             "': no such file (a tokenizer.json, or 'byte')");
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const Error&) {
    throw Error("tokenizer '" + path + "': cannot read it (missing, unreadable or a directory)");
  }
  return from_json_text(text, "tokenizer '" + path + "'");
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_json_text(std::string_view text,
                                                           const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), json_depth_limit(where));
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not valid JSON (" + e.what() + ")");
  }
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->where_ = where;
  t->serial_ = next_serial++;
  try {
    t->load(j, where);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": unexpected JSON content (" + e.what() + ")");
  }
  return t;
}

void BpeTokenizer::load(const nlohmann::json& j, const std::string& where) {
  MOET_CHECK(j.is_object(), where, ": a tokenizer.json must be a JSON object");
  // Normalizer: none, NFC, or a Sequence of at most those.
  const auto& norm = field(j, "normalizer");
  if (!norm.is_null()) {
    const auto& type = field(norm, "type");
    bool ok = type == "NFC";
    if (type == "Sequence" && field(norm, "normalizers").is_array()) {
      ok = true;
      for (const auto& n : norm["normalizers"]) {
        ok &= field(n, "type") == "NFC";
        if (!ok)
          throw Error(
              where + ": normalizer " +
              (field(n, "type").is_string() ? field(n, "type").get<std::string>() : n.dump()) +
              " is not supported (moet supports none or NFC)");
      }
      nfc_ = !norm["normalizers"].empty();
    } else {
      nfc_ = ok;
    }
    MOET_CHECK(ok, where, ": normalizer ", type.is_string() ? type.get<std::string>() : norm.dump(),
               " is not supported (moet supports none or NFC)");
  }
  const auto& dec = field(j, "decoder");
  MOET_CHECK(field(dec, "type") == "ByteLevel", where, ": decoder ",
             dec.is_null() ? std::string("null")
                           : (field(dec, "type").is_string() ? field(dec, "type").get<std::string>()
                                                             : dec.dump()),
             " is not supported (moet supports the ByteLevel decoder)");
  load_model(field(j, "model"), where);
  pre_.emplace(PreTokenizer::from_json(field(j, "pre_tokenizer"), where));
  load_added(field(j, "added_tokens"), where);
  load_post_processor(field(j, "post_processor"), where);
  pick_special_ids();
}

void BpeTokenizer::load_model(const nlohmann::json& m, const std::string& where) {
  MOET_CHECK(m.is_object(), where, ": no \"model\" object");
  const auto& type = field(m, "type");
  MOET_CHECK(type == "BPE" || (type.is_null() && m.contains("merges")), where, ": model type ",
             type.is_string() ? type.get<std::string>() : type.dump(),
             " is not supported (moet supports byte-level BPE)");
  MOET_CHECK(!flag(m, "byte_fallback", false, where), where,
             ": BPE byte_fallback is not supported (moet supports byte-level BPE)");
  const auto& dropout = field(m, "dropout");
  MOET_CHECK(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0), where,
             ": BPE dropout is not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto& v = field(m, k);
    MOET_CHECK(v.is_null() || v == "", where, ": BPE ", k, " is not supported");
  }
  ignore_merges_ = flag(m, "ignore_merges", false, where);
  fuse_unk_ = flag(m, "fuse_unk", false, where);
  const auto& vocab = field(m, "vocab");
  MOET_CHECK(vocab.is_object(), where, ": model.vocab must be an object of token -> id");
  std::unordered_map<std::string, int32_t> by_spelling;
  by_spelling.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id =
        checked_id(it.value(), where, "vocab token " + nlohmann::json(it.key()).dump());
    by_spelling[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  tokens_.assign(static_cast<size_t>(max_id + 1), "");
  bytes_.assign(tokens_.size(), "");
  kind_.assign(tokens_.size(), 0);
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  vocab_.reserve(by_spelling.size());
  std::string raw;
  for (const auto& [spelling, id] : by_spelling) {
    tokens_[id] = spelling;
    kind_[id] = 1;
    if (byte_level_to_bytes(spelling, raw)) {
      bytes_[id] = raw;
      vocab_[raw] = id;
      if (raw.size() == 1) byte_id_[static_cast<uint8_t>(raw[0])] = id;
    } else {
      bytes_[id] = spelling;  // not byte-level: no word can reach it; decodes as its own text
    }
  }
  const auto& unk = field(m, "unk_token");
  if (!unk.is_null()) {
    MOET_CHECK(unk.is_string() && by_spelling.count(unk.get<std::string>()), where,
               ": BPE unk_token ", unk.dump(), " is not in the vocab");
    unk_ = by_spelling[unk.get<std::string>()];
  }
  const auto& merges = field(m, "merges");
  MOET_CHECK(merges.is_array(), where, ": model.merges must be an array");
  pairs_ = std::make_unique<PairTable>(merges.size());
  n_merges_ = merges.size();
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& mg = merges[r];
    std::string a, b;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ');
      MOET_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where,
                 ": merge #", r, " ", mg.dump(), " is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      MOET_CHECK(mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string(), where,
                 ": merge #", r, " must be \"a b\" or [\"a\", \"b\"]");
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    }
    const auto ia = by_spelling.find(a), ib = by_spelling.find(b), iab = by_spelling.find(a + b);
    MOET_CHECK(ia != by_spelling.end() && ib != by_spelling.end() && iab != by_spelling.end(),
               where, ": merge #", r, " ", mg.dump(), " uses a token that is not in the vocab");
    pairs_->set(ia->second, ib->second, static_cast<int32_t>(r), iab->second);
  }
}

void BpeTokenizer::load_added(const nlohmann::json& a, const std::string& where) {
  if (a.is_null()) return;
  MOET_CHECK(a.is_array(), where, ": added_tokens must be an array");
  for (const auto& t : a) {
    const auto& content = field(t, "content");
    MOET_CHECK(content.is_string() && !content.get<std::string>().empty(), where,
               ": an added token needs a non-empty \"content\" string");
    AddedToken tok;
    tok.content = content.get<std::string>();
    tok.match = tok.content;
    MOET_CHECK(utf8_valid_prefix(tok.content) == tok.content.size(), where, ": added token ",
               content.dump(), " is not valid UTF-8");
    const std::string at = where + ": added token " + content.dump();
    tok.id = checked_id(field(t, "id"), where, "added token " + content.dump());
    tok.special = flag(t, "special", false, at);
    tok.single_word = flag(t, "single_word", false, at);
    tok.lstrip = flag(t, "lstrip", false, at);
    tok.rstrip = flag(t, "rstrip", false, at);
    tok.normalized = flag(t, "normalized", !tok.special, at);
    if (added_by_content_.count(tok.content)) continue;  // tokenizers keeps the first
    // A token the model already has keeps the model's id, as tokenizers' add_tokens does.
    std::string raw;
    if (byte_level_to_bytes(tok.content, raw)) {
      const auto in_vocab = vocab_.find(raw);
      if (in_vocab != vocab_.end() && tokens_[in_vocab->second] == tok.content)
        tok.id = in_vocab->second;
    }
    if (static_cast<size_t>(tok.id) >= tokens_.size()) {
      tokens_.resize(tok.id + 1, "");
      bytes_.resize(tok.id + 1, "");
      kind_.resize(tok.id + 1, 0);
    }
    kind_[tok.id] = 2;
    added_by_content_[tok.content] = tok.id;
    added_.push_back(std::move(tok));
  }
  std::string raw;
  for (size_t i = 0; i < added_.size(); ++i) {
    // Tokens matched in normalized text are matched, named and decoded by their normalized
    // spelling; the ByteLevel decoder turns that spelling into bytes like any token's (its raw
    // UTF-8 when a character lies outside the byte-level alphabet).
    if (added_[i].normalized && nfc_) added_[i].match = nfc(added_[i].content);
    const int32_t id = added_[i].id;
    tokens_[id] = added_[i].match;
    bytes_[id] = byte_level_to_bytes(added_[i].match, raw) ? raw : added_[i].match;
    AddedSet& set = sets_[added_[i].normalized ? 1 : 0];
    set.by_first[static_cast<uint8_t>(added_[i].match[0])].push_back(static_cast<int32_t>(i));
    set.empty = false;
  }
  for (AddedSet& set : sets_)
    for (auto& v : set.by_first)
      std::stable_sort(v.begin(), v.end(), [&](int32_t x, int32_t y) {
        return added_[x].match.size() > added_[y].match.size();
      });
}

void BpeTokenizer::load_post_processor(const nlohmann::json& p, const std::string& where) {
  if (p.is_null()) return;
  const auto& type = field(p, "type");
  const std::string name = type.is_string() ? type.get<std::string>() : p.dump();
  const std::string at = where + ": post_processor " + name;
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    MOET_CHECK(field(p, "processors").is_array(), at, " needs a \"processors\" array");
    for (const auto& q : p["processors"]) load_post_processor(q, where);
    return;
  }
  std::vector<int32_t> before, after;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const auto& cls = field(p, "cls");
    const auto& sep = field(p, "sep");
    MOET_CHECK(cls.is_array() && cls.size() == 2 && sep.is_array() && sep.size() == 2, at,
               " needs \"cls\" and \"sep\" as [token, id]");
    before.push_back(checked_id(cls[1], at, "cls"));
    after.push_back(checked_id(sep[1], at, "sep"));
  } else if (type == "TemplateProcessing") {
    const auto& single = field(p, "single");
    const auto& specials = field(p, "special_tokens");
    MOET_CHECK(single.is_array() && (specials.is_object() || specials.is_null()), at,
               " needs a \"single\" template");
    int sequences = 0;
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        MOET_CHECK(field(item["Sequence"], "id") == "A", at,
                   ": the single template may only hold sequence A");
        ++sequences;
        continue;
      }
      const auto& name_j = field(field(item, "SpecialToken"), "id");
      MOET_CHECK(name_j.is_string(), at, ": template items must be Sequence or SpecialToken");
      const auto& tok = field(specials, name_j.get<std::string>().c_str());
      MOET_CHECK(field(tok, "ids").is_array(), at, ": special token ", name_j.dump(),
                 " has no \"ids\" in special_tokens");
      for (const auto& id : tok["ids"])
        (sequences ? after : before).push_back(checked_id(id, at, name_j.dump()));
    }
    MOET_CHECK(sequences == 1, at, ": the single template must hold sequence A once");
  } else {
    throw Error(at +
                " is not supported (supported: TemplateProcessing, ByteLevel, "
                "RobertaProcessing, BertProcessing, Sequence)");
  }
  for (int32_t id : before)
    MOET_CHECK(id < vocab_size(), at, ": id ", id, " is outside the vocabulary");
  for (int32_t id : after)
    MOET_CHECK(id < vocab_size(), at, ": id ", id, " is outside the vocabulary");
  // A later processor frames what the earlier ones produced.
  prefix_.insert(prefix_.begin(), before.begin(), before.end());
  suffix_.insert(suffix_.end(), after.begin(), after.end());
}

void BpeTokenizer::pick_special_ids() {
  static const char* const kEod[] = {
      "<|endoftext|>", "<｜end▁of▁sentence｜>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>"};
  static const char* const kBos[] = {"<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<s>", "<bos>",
                                     "<|startoftext|>"};
  for (const char* name : kEod) {
    const auto it = added_by_content_.find(name);
    if (it != added_by_content_.end()) {
      eod_ = it->second;
      break;
    }
  }
  if (!eod_ && !suffix_.empty()) eod_ = suffix_.back();
  if (!prefix_.empty()) {
    bos_ = prefix_.front();
  } else {
    for (const char* name : kBos) {
      const auto it = added_by_content_.find(name);
      if (it != added_by_content_.end()) {
        bos_ = it->second;
        break;
      }
    }
  }
}

std::string BpeTokenizer::describe() const {
  std::string s = str("byte-level BPE (", where_, "): ", vocab_size(), " ids (", n_merges_,
                      " merges, ", added_.size(), " added tokens), eod ");
  s += eod_ ? str(tokens_[*eod_], " (id ", *eod_, ")") : std::string("none");
  return s;
}

int32_t BpeTokenizer::eod_id() const {
  MOET_CHECK(eod_.has_value(), where_,
             " has no end-of-document token (none of <|endoftext|>, <｜end▁of▁sentence｜>, "
             "<|end_of_text|>, </s>, <eos> is an added token, and the post-processor appends no "
             "EOS); add one as a special token");
  return *eod_;
}

void BpeTokenizer::add_special_tokens(std::vector<int32_t>& ids) const {
  if (!prefix_.empty()) ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto a = added_by_content_.find(std::string(token));
  if (a != added_by_content_.end()) return a->second;
  std::string raw;
  if (byte_level_to_bytes(token, raw)) {
    const auto it = vocab_.find(raw);
    if (it != vocab_.end()) return it->second;
  }
  for (size_t id = 0; id < tokens_.size(); ++id)
    if (kind_[id] == 1 && tokens_[id] == token) return static_cast<int32_t>(id);
  return std::nullopt;
}

std::string BpeTokenizer::id_to_token(int32_t id) const {
  return id >= 0 && id < vocab_size() ? tokens_[id] : std::string();
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  if (utf8_valid_prefix(text) != text.size()) {
    const std::string clean = utf8_replace_invalid(text);
    split_added(clean, 0, out);
  } else {
    split_added(text, 0, out);
  }
}

void BpeTokenizer::split_added(std::string_view text, int pass, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  auto gap = [&](size_t b, size_t e) {
    if (e <= b) return;
    const std::string_view g = text.substr(b, e - b);
    if (pass == 0) {
      if (nfc_) {
        split_added(nfc(g), 1, out);
      } else {
        split_added(g, 1, out);
      }
    } else {
      auto word = [&](std::string_view w) { bpe(w, out); };
      pre_->split(g, word);
    }
  };
  const AddedSet& set = sets_[pass];
  if (set.empty) {
    gap(0, text.size());
    return;
  }
  // tokenizers' AddedVocabulary::find_matches: leftmost-longest matches, then single_word,
  // lstrip and rstrip applied to each.
  size_t start_offset = 0, pos = 0;
  while (pos < text.size()) {
    const auto& cands = set.by_first[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (int32_t c : cands) {
      const std::string& s = added_[c].match;
      if (s.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, s.data(), s.size()) == 0) {
        hit = &added_[c];
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->match.size();
    pos = stop;
    if (hit->single_word) {
      const bool start_space = start == 0 || !word_char_at_end(text.substr(0, start));
      const bool stop_space = stop == text.size() || !word_char_at_start(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (hit->lstrip) {
      size_t s = start, cs = 0;
      while (s > 0 && is_white_space(char_before(text, s, cs))) s = cs;
      start = std::max(s, start_offset);
    }
    if (hit->rstrip) {
      size_t len = 0;
      while (stop < text.size() && is_white_space(char_at(text, stop, len))) stop += len;
    }
    gap(start_offset, start);
    out.push_back(hit->id);
    start_offset = stop;
  }
  gap(start_offset, text.size());
}

void BpeTokenizer::bpe(std::string_view word, std::vector<int32_t>& out) const {
  thread_local MergeScratch scratch;
  const bool cacheable = word.size() <= WordCache::kMaxWord;
  WordCache* cache = cacheable ? &word_cache(serial_) : nullptr;
  uint64_t h = 0;
  if (cacheable) {
    h = hash_bytes(word);
    uint32_t n = 0;
    if (const int32_t* ids = cache->find(word, h, n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
  }
  std::vector<int32_t>& ids = scratch.ids;
  ids.clear();
  const auto whole = ignore_merges_ ? vocab_.find(std::string(word)) : vocab_.end();
  if (whole != vocab_.end()) {
    ids.push_back(whole->second);
  } else {
    auto& sym = scratch.symbols;
    auto& heap = scratch.heap;
    sym.clear();
    heap.clear();
    bool last_unk = false;
    for (char c : word) {
      const int32_t id = byte_id_[static_cast<uint8_t>(c)];
      if (id < 0) {
        // A byte outside the vocab: the unknown token (consecutive ones fused when asked), or
        // nothing when there is none, as tokenizers does.
        if (unk_ >= 0 && !(fuse_unk_ && last_unk)) {
          sym.push_back({unk_, static_cast<int32_t>(sym.size()) - 1, -1, true});
        }
        last_unk = unk_ >= 0;
        continue;
      }
      last_unk = false;
      sym.push_back({id, static_cast<int32_t>(sym.size()) - 1, -1, true});
    }
    const int32_t n = static_cast<int32_t>(sym.size());
    for (int32_t i = 0; i + 1 < n; ++i) sym[i].next = i + 1;
    for (int32_t i = 0; i + 1 < n; ++i)
      if (const auto* m = pairs_->get(sym[i].id, sym[i + 1].id))
        heap.push_back({m->rank, i, m->new_id});
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const MergeScratch::Merge top = heap.back();
      heap.pop_back();
      auto& left = sym[top.pos];
      if (!left.alive || left.next < 0) continue;
      const int32_t right_pos = left.next;
      const auto* rule = pairs_->get(left.id, sym[right_pos].id);
      if (!rule || rule->new_id != top.new_id) continue;  // a stale entry
      left.id = top.new_id;
      left.next = sym[right_pos].next;
      sym[right_pos].alive = false;
      if (left.next >= 0) sym[left.next].prev = top.pos;
      if (left.prev >= 0) {
        if (const auto* m = pairs_->get(sym[left.prev].id, left.id)) {
          heap.push_back({m->rank, left.prev, m->new_id});
          std::push_heap(heap.begin(), heap.end(), later);
        }
      }
      if (left.next >= 0) {
        if (const auto* m = pairs_->get(left.id, sym[left.next].id)) {
          heap.push_back({m->rank, top.pos, m->new_id});
          std::push_heap(heap.begin(), heap.end(), later);
        }
      }
    }
    for (int32_t i = 0; i < n; ++i)
      if (sym[i].alive) ids.push_back(sym[i].id);
  }
  if (cacheable) cache->insert(word, h, ids.data(), static_cast<uint32_t>(ids.size()));
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string BpeTokenizer::decode(const int32_t* ids, int64_t n) const {
  // Every token, added ones too, goes through the ByteLevel decoder as in tokenizers: its bytes
  // (bytes_), then one lossy UTF-8 conversion of them all.
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    MOET_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " at position ", i,
               " is outside the vocabulary [0, ", vocab_size(), ") of ", where_);
    out += bytes_[id];
  }
  if (utf8_valid_prefix(out) != out.size()) out = utf8_replace_invalid(out);
  return out;
}

}  // namespace moet
