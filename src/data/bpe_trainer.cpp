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

}  // namespace

std::string train_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& o,
                      BpeTrainStats* stats) {
  const int64_t n_special = static_cast<int64_t>(o.special_tokens.size());
  MOET_CHECK(o.vocab_size >= n_special + 256, "--vocab-size ", o.vocab_size,
             " is smaller than the special tokens and the 256 bytes (", n_special + 256, ")");
  std::unordered_set<std::string> special_set;
  for (const auto& s : o.special_tokens) {
    MOET_CHECK(!s.empty() && utf8_valid_prefix(s) == s.size(), "special token '", s,
               "' must be non-empty UTF-8");
    MOET_CHECK(special_set.insert(s).second, "special token '", s, "' is given twice");
  }
  // Count the words, each thread into its own map.
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

  // Ids: the special tokens, the 256 bytes in the order of their byte-level characters (as
  // GPT-2's vocab), then one per merge.
  std::vector<std::string> token_bytes(o.special_tokens.begin(), o.special_tokens.end());
  int32_t byte_id[256];
  std::vector<int> order(256);
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::sort(order.begin(), order.end(),
            [](int x, int y) { return byte_to_unicode(x) < byte_to_unicode(y); });
  for (int b : order) {
    byte_id[b] = static_cast<int32_t>(token_bytes.size());
    token_bytes.emplace_back(1, static_cast<char>(b));
  }

  // Words as symbol ids, with their counts, sorted for a reproducible layout.
  std::vector<std::pair<std::string, int64_t>> sorted(counts[0].begin(), counts[0].end());
  WordCounts().swap(counts[0]);
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (char c : sorted[w].first) words[w].push_back(byte_id[static_cast<uint8_t>(c)]);
    freq[w] = sorted[w].second;
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t k = pair_key(words[w][i], words[w][i + 1]);
      pair_count[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  if (stats) {
    stats->bytes = total_bytes;
    stats->unique_words = static_cast<int64_t>(words.size());
    stats->words = 0;
    for (int64_t x : word_totals) stats->words += x;
  }
  std::priority_queue<Candidate> queue;
  for (const auto& [k, c] : pair_count)
    if (c >= o.min_frequency) queue.push({c, k});

  // The merge loop: take the most frequent pair, rewrite the words that hold it, and update the
  // counts of only the pairs that changed.
  std::unordered_set<std::string> spellings(special_set);
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<uint32_t> visited(words.size(), 0);
  std::vector<std::pair<uint64_t, int64_t>> delta;
  std::unordered_map<uint64_t, int64_t> changed;
  while (static_cast<int64_t>(token_bytes.size()) < o.vocab_size && !queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto pc = pair_count.find(top.pair);
    const int64_t now = pc == pair_count.end() ? 0 : pc->second;
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
    std::vector<uint32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    for (uint32_t w : list) {
      if (visited[w] == stamp) continue;
      visited[w] = stamp;
      auto& sym = words[w];
      bool has = false;
      for (size_t i = 0; i + 1 < sym.size() && !has; ++i) has = sym[i] == a && sym[i + 1] == b;
      if (!has) continue;
      for (size_t i = 0; i + 1 < sym.size(); ++i) changed[pair_key(sym[i], sym[i + 1])] -= freq[w];
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
        changed[k] += freq[w];
        if (sym[i] == id || sym[i + 1] == id) {
          auto& l = where[k];
          if (l.empty() || l.back() != w) l.push_back(w);
        }
      }
    }
    for (const auto& [k, d] : changed) {
      if (d == 0) continue;
      int64_t& c = pair_count[k];
      c += d;
      if (c <= 0) {
        pair_count.erase(k);
      } else if (d > 0 && c >= o.min_frequency) {
        queue.push({c, k});
      }
    }
    pair_count.erase(top.pair);
  }
  if (stats) stats->merges = static_cast<int64_t>(merges.size());

  // tokenizer.json, laid out as tokenizers writes it.
  using ojson = nlohmann::ordered_json;
  auto spelling = [&](int32_t id) {
    return id < n_special ? token_bytes[id] : bytes_to_byte_level(token_bytes[id]);
  };
  ojson added = ojson::array();
  for (int64_t i = 0; i < n_special; ++i)
    added.push_back({{"id", i},
                     {"content", o.special_tokens[i]},
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

}  // namespace moet
