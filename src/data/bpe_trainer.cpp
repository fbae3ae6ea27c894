#include "data/bpe_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "data/pretokenizer.h"
#include "data/text_bytes.h"

namespace moet {

namespace {

using WordCounts = std::unordered_map<std::string, int64_t>;

// Texts are cut into pieces of about this size for the counting threads, at a newline followed
// by a non-space byte, so no regex match (e.g. a run of blank lines) spans two pieces.
constexpr size_t kPieceBytes = 1 << 20;

std::vector<std::string_view> cut(std::string_view text) {
  std::vector<std::string_view> pieces;
  while (text.size() > kPieceBytes) {
    size_t at = kPieceBytes;
    while (at + 1 < text.size() &&
           !(text[at] == '\n' && !std::isspace(static_cast<unsigned char>(text[at + 1])) &&
             (static_cast<uint8_t>(text[at + 1]) & 0xC0) != 0x80))
      ++at;
    if (at + 1 >= text.size()) break;
    pieces.push_back(text.substr(0, at + 1));
    text.remove_prefix(at + 1);
  }
  if (!text.empty()) pieces.push_back(text);
  return pieces;
}

void count_words(std::string_view text, const std::vector<std::string>& specials,
                 const PreTokenizer& pre, WordCounts& counts, int64_t& words) {
  std::string clean;
  if (utf8_valid_prefix(text) != text.size()) {
    clean = utf8_replace_invalid(text);
    text = clean;
  }
  auto word = [&](std::string_view w) {
    ++counts[std::string(w)];
    ++words;
  };
  // The special tokens are split out first (leftmost, longest), as when encoding.
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    for (const auto& s : specials)
      if (s.size() > len && text.compare(pos, s.size(), s) == 0) len = s.size();
    if (len == 0) {
      ++pos;
      continue;
    }
    pre.split(text.substr(start, pos - start), word);
    pos += len;
    start = pos;
  }
  pre.split(text.substr(start), word);
}

struct Candidate {
  int64_t count;
  uint64_t pair;
  // Most frequent first; among equals the smallest (left id, right id), as tokenizers' trainer.
  bool operator<(const Candidate& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// The special tokens as a set, checked: non-empty UTF-8, each given once, and the vocabulary
// large enough for them and the 256 bytes.
std::unordered_set<std::string> checked_special_tokens(const BpeTrainOptions& o) {
  const int64_t n_special = static_cast<int64_t>(o.special_tokens.size());
  MOET_CHECK(o.vocab_size >= n_special + 256, "--vocab-size ", o.vocab_size,
             " is smaller than the special tokens and the 256 bytes (", n_special + 256, ")");
  std::unordered_set<std::string> special_set;
  for (const auto& s : o.special_tokens) {
    MOET_CHECK(!s.empty() && utf8_valid_prefix(s) == s.size(), "special token '", s,
               "' must be non-empty UTF-8");
    MOET_CHECK(special_set.insert(s).second, "special token '", s, "' is given twice");
  }
  return special_set;
}

// Every word of the texts and how often it occurs, counted by threads (each into its own map)
// over pieces of about kPieceBytes; the texts' bytes and their words into stats.
WordCounts count_all_words(const std::vector<std::string_view>& texts, const BpeTrainOptions& o,
                           BpeTrainStats* stats) {
  std::vector<std::string_view> pieces;
  int64_t total_bytes = 0;
  for (std::string_view t : texts) {
    total_bytes += static_cast<int64_t>(t.size());
    for (std::string_view p : cut(t)) pieces.push_back(p);
  }
  const int threads = std::max(
      1, std::min<int>(
             o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency()),
             static_cast<int>(pieces.size())));
  const PreTokenizer pre = PreTokenizer::gpt2();
  std::vector<WordCounts> counts(threads);
  std::vector<int64_t> word_totals(threads, 0);
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(threads);
  auto work = [&](int t) {
    try {
      for (size_t i; (i = next++) < pieces.size();)
        count_words(pieces[i], o.special_tokens, pre, counts[t], word_totals[t]);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int t = 1; t < threads; ++t) {
    for (auto& [w, c] : counts[t]) counts[0][w] += c;
    WordCounts().swap(counts[t]);
  }
  if (stats) {
    stats->bytes = total_bytes;
    stats->words = 0;
    for (int64_t x : word_totals) stats->words += x;
  }
  return std::move(counts[0]);
}

// The first ids: the special tokens, then the 256 bytes in the order of their byte-level
// characters (as GPT-2's vocab); each token's bytes, and each byte's id in byte_id.
std::vector<std::string> initial_tokens(const std::vector<std::string>& special_tokens,
                                        int32_t byte_id[256]) {
  std::vector<std::string> token_bytes(special_tokens.begin(), special_tokens.end());
  std::vector<int> order(256);
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::sort(order.begin(), order.end(),
            [](int x, int y) { return byte_to_unicode(x) < byte_to_unicode(y); });
  for (int b : order) {
    byte_id[b] = static_cast<int32_t>(token_bytes.size());
    token_bytes.emplace_back(1, static_cast<char>(b));
  }
  return token_bytes;
}

// The words as symbol ids with their counts, and for every adjacent pair of symbols its count
// and the words that hold it (a word may stay listed after a merge took the pair out of it).
struct WordPairs {
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
};

// The words sorted, for a reproducible layout, spelled in byte ids.
WordPairs word_pairs(WordCounts&& counts, const int32_t byte_id[256]) {
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  WordCounts().swap(counts);
  std::sort(sorted.begin(), sorted.end());
  WordPairs wp;
  wp.words.resize(sorted.size());
  wp.freq.resize(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (char c : sorted[w].first) wp.words[w].push_back(byte_id[static_cast<uint8_t>(c)]);
    wp.freq[w] = sorted[w].second;
    for (size_t i = 0; i + 1 < wp.words[w].size(); ++i) {
      const uint64_t k = pair_key(wp.words[w][i], wp.words[w][i + 1]);
      wp.pair_count[k] += wp.freq[w];
      auto& list = wp.where[k];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  return wp;
}

// Rewrites word w with every (a, b) as the new symbol id, and adds to `changed` what that does
// to each pair's count; lists w under the pairs the new symbol forms. A word without (a, b) is
// left as it is.
void merge_in_word(WordPairs& wp, uint32_t w, int32_t a, int32_t b, int32_t id,
                   std::unordered_map<uint64_t, int64_t>& changed) {
  auto& sym = wp.words[w];
  bool has = false;
  for (size_t i = 0; i + 1 < sym.size() && !has; ++i) has = sym[i] == a && sym[i + 1] == b;
  if (!has) return;
  const int64_t f = wp.freq[w];
  for (size_t i = 0; i + 1 < sym.size(); ++i) changed[pair_key(sym[i], sym[i + 1])] -= f;
  size_t out = 0;
  for (size_t i = 0; i < sym.size(); ++i) {
    if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
      sym[out++] = id;
      ++i;
    } else {
      sym[out++] = sym[i];
    }
  }
  sym.resize(out);
  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    const uint64_t k = pair_key(sym[i], sym[i + 1]);
    changed[k] += f;
    if (sym[i] == id || sym[i + 1] == id) {
      auto& l = wp.where[k];
      if (l.empty() || l.back() != w) l.push_back(w);
    }
  }
}

// The merge loop: take the most frequent pair, rewrite the words that hold it, and update the
// counts of only the pairs that changed, until the vocabulary is full or no pair is frequent
// enough. Appends each merged token's bytes to token_bytes; returns the merges in order.
std::vector<std::pair<int32_t, int32_t>> learn_merges(WordPairs& wp,
                                                      std::vector<std::string>& token_bytes,
                                                      std::unordered_set<std::string> spellings,
                                                      const BpeTrainOptions& o) {
  std::priority_queue<Candidate> queue;
  for (const auto& [k, c] : wp.pair_count)
    if (c >= o.min_frequency) queue.push({c, k});
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<uint32_t> visited(wp.words.size(), 0);
  std::unordered_map<uint64_t, int64_t> changed;
  while (static_cast<int64_t>(token_bytes.size()) < o.vocab_size && !queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto pc = wp.pair_count.find(top.pair);
    const int64_t now = pc == wp.pair_count.end() ? 0 : pc->second;
    if (now != top.count) {
      if (now > 0 && now < top.count && now >= o.min_frequency) queue.push({now, top.pair});
      continue;
    }
    const int32_t a = static_cast<int32_t>(top.pair >> 32), b = static_cast<int32_t>(top.pair);
    const int32_t id = static_cast<int32_t>(token_bytes.size());
    token_bytes.push_back(token_bytes[a] + token_bytes[b]);
    MOET_CHECK(spellings.insert(token_bytes.back()).second, "merge ", merges.size(),
               " makes the token '", token_bytes.back(),
               "', which is also a special token; choose other special tokens");
    merges.push_back({a, b});
    const uint32_t stamp = static_cast<uint32_t>(merges.size());
    changed.clear();
    std::vector<uint32_t> list = std::move(wp.where[top.pair]);
    wp.where.erase(top.pair);
    for (uint32_t w : list) {
      if (visited[w] == stamp) continue;
      visited[w] = stamp;
      merge_in_word(wp, w, a, b, id, changed);
    }
    for (const auto& [k, d] : changed) {
      if (d == 0) continue;
      int64_t& c = wp.pair_count[k];
      c += d;
      if (c <= 0) {
        wp.pair_count.erase(k);
      } else if (d > 0 && c >= o.min_frequency) {
        queue.push({c, k});
      }
    }
    wp.pair_count.erase(top.pair);
  }
  return merges;
}

// tokenizer.json, laid out as tokenizers writes it.
std::string tokenizer_json(const std::vector<std::string>& token_bytes,
                           const std::vector<std::pair<int32_t, int32_t>>& merges,
                           const std::vector<std::string>& special_tokens) {
  using ojson = nlohmann::ordered_json;
  const int64_t n_special = static_cast<int64_t>(special_tokens.size());
  auto spelling = [&](int32_t id) {
    return id < n_special ? token_bytes[id] : bytes_to_byte_level(token_bytes[id]);
  };
  ojson added = ojson::array();
  for (int64_t i = 0; i < n_special; ++i)
    added.push_back({{"id", i},
                     {"content", special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  ojson vocab = ojson::object();
  for (size_t id = 0; id < token_bytes.size(); ++id) vocab[spelling(static_cast<int32_t>(id))] = id;
  ojson merge_list = ojson::array();
  for (const auto& [x, y] : merges) merge_list.push_back({spelling(x), spelling(y)});
  const ojson byte_level = {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", true},
                            {"use_regex", true}};
  ojson j = {{"version", "1.0"},
             {"truncation", nullptr},
             {"padding", nullptr},
             {"added_tokens", added},
             {"normalizer", nullptr},
             {"pre_tokenizer", byte_level},
             {"post_processor", byte_level},
             {"decoder", byte_level},
             {"model",
              {{"type", "BPE"},
               {"dropout", nullptr},
               {"unk_token", nullptr},
               {"continuing_subword_prefix", nullptr},
               {"end_of_word_suffix", nullptr},
               {"fuse_unk", false},
               {"byte_fallback", false},
               {"ignore_merges", false},
               {"vocab", vocab},
               {"merges", merge_list}}}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
}

}  // namespace

std::string train_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& o,
                      BpeTrainStats* stats) {
  std::unordered_set<std::string> special_set = checked_special_tokens(o);
  WordCounts counts = count_all_words(texts, o, stats);
  int32_t byte_id[256];
  std::vector<std::string> token_bytes = initial_tokens(o.special_tokens, byte_id);
  WordPairs wp = word_pairs(std::move(counts), byte_id);
  if (stats) stats->unique_words = static_cast<int64_t>(wp.words.size());
  const std::vector<std::pair<int32_t, int32_t>> merges =
      learn_merges(wp, token_bytes, std::move(special_set), o);
  if (stats) stats->merges = static_cast<int64_t>(merges.size());
  return tokenizer_json(token_bytes, merges, o.special_tokens);
}

}  // namespace moet
