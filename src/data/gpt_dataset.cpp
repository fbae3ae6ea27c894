#include "data/gpt_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"

namespace moet {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kDocShuffleTag = 0x646F6373;     // "docs"
constexpr uint64_t kSampleShuffleTag = 0x73686666;  // "shff"
constexpr char kCacheMagic[8] = {'M', 'O', 'E', 'T', 'S', 'I', 'X', '1'};

// Fisher-Yates with the counter-based RNG of (seed, stream).
template <typename T>
void shuffle_in_place(T* v, int64_t n, uint64_t seed, uint64_t stream) {
  const CounterRng rng(seed, stream);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[rng.below(uint64_t(i), uint64_t(i) + 1)]);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

template <typename T>
void put(std::string& out, const T* v, size_t n) {
  out.append(reinterpret_cast<const char*>(v), n * sizeof(T));
}

// The cache file: magic, the key's length and text, four counts, then the three arrays.
std::string serialise(const SampleIndex& ix, const std::string& key) {
  std::string out(kCacheMagic, 8);
  const uint64_t head[5] = {key.size(), uint64_t(ix.epochs), uint64_t(ix.samples_per_epoch),
                            uint64_t(ix.num_samples), uint64_t(ix.doc_idx.size())};
  put(out, head, 1);
  out += key;
  put(out, head + 1, 4);
  put(out, ix.doc_idx.data(), ix.doc_idx.size());
  put(out, ix.sample_idx.data(), ix.sample_idx.size());
  put(out, ix.shuffle.data(), ix.shuffle.size());
  return out;
}

// The index in `path` if it exists, was written for `key` and is consistent with the documents;
// false otherwise (a damaged or stale cache is rebuilt, never trusted).
bool load_cached(const std::string& path, const std::string& key,
                 const std::vector<int32_t>& lengths, int64_t T, SampleIndex& ix) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (b.size() - at < n) return false;
    std::memcpy(dst, b.data() + at, n);
    at += n;
    return true;
  };
  char magic[8];
  uint64_t key_len = 0, head[4];
  if (!take(magic, 8) || std::memcmp(magic, kCacheMagic, 8) != 0 || !take(&key_len, 8) ||
      key_len != key.size() || b.compare(at, key_len, key) != 0)
    return false;
  at += key_len;
  if (!take(head, sizeof head)) return false;
  const int64_t D = int64_t(lengths.size());
  ix.epochs = int64_t(head[0]);
  ix.samples_per_epoch = int64_t(head[1]);
  ix.num_samples = int64_t(head[2]);
  if (ix.epochs <= 0 || ix.num_samples < 0 || head[3] != uint64_t(ix.epochs * D) ||
      uint64_t(b.size() - at) != head[3] * 4 + uint64_t(ix.num_samples + 1) * 24 - 8)
    return false;
  ix.doc_idx.resize(head[3]);
  ix.sample_idx.resize(size_t(ix.num_samples + 1) * 2);
  ix.shuffle.resize(size_t(ix.num_samples));
  take(ix.doc_idx.data(), ix.doc_idx.size() * 4);
  take(ix.sample_idx.data(), ix.sample_idx.size() * 8);
  take(ix.shuffle.data(), ix.shuffle.size() * 8);
  for (int32_t d : ix.doc_idx)
    if (d < 0 || d >= D) return false;
  for (int64_t i = 0; i <= ix.num_samples; ++i) {
    const int64_t pos = ix.sample_idx[size_t(2 * i)], off = ix.sample_idx[size_t(2 * i + 1)];
    if (pos < 0 || pos >= int64_t(ix.doc_idx.size()) || off < 0 ||
        off >= lengths[size_t(ix.doc_idx[size_t(pos)])])
      return false;
  }
  for (int64_t s : ix.shuffle)
    if (s < 0 || s >= ix.num_samples) return false;
  (void)T;
  return true;
}

// Writes `bytes` to `path` atomically (a temporary name, renamed); false when the directory
// cannot take it.
bool write_atomically(const std::string& path, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return false;
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

}  // namespace

DataSplit parse_data_split(const std::string& text) {
  std::vector<double> v;
  std::stringstream ss(text);
  std::string field;
  while (std::getline(ss, field, ',')) {
    char* end = nullptr;
    const double x = std::strtod(field.c_str(), &end);
    MOET_CHECK(!field.empty() && end && *end == '\0' && std::isfinite(x) && x >= 0, "--split '",
               text, "': '", field, "' is not a non-negative number (e.g. --split 95,5)");
    v.push_back(x);
  }
  MOET_CHECK(v.size() == 2 || v.size() == 3, "--split '", text,
             "' needs two or three shares: train,validation[,test] (e.g. 95,5)");
  MOET_CHECK(v[0] + v[1] + (v.size() == 3 ? v[2] : 0) > 0, "--split '", text,
             "' gives no split any documents");
  DataSplit s;
  s.train = v[0];
  s.valid = v[1];
  s.test = v.size() == 3 ? v[2] : 0;
  return s;
}

std::pair<int64_t, int64_t> split_document_ranges(const DataSplit& split, int64_t n) {
  const double total = split.train + split.valid + split.test;
  const auto bound = [&](double share) {
    return std::min<int64_t>(n, int64_t(std::nearbyint(share / total * double(n))));
  };
  return {bound(split.train), bound(split.train + split.valid)};
}

SampleIndex build_sample_index(const std::vector<int32_t>& doc_lengths, int64_t T, uint64_t seed,
                               int64_t min_samples, const std::string& name) {
  MOET_ASSERT(T > 0 && min_samples >= 0);
  const auto D = int64_t(doc_lengths.size());
  const int64_t tokens = std::accumulate(doc_lengths.begin(), doc_lengths.end(), int64_t{0});
  MOET_CHECK(tokens >= T + 1, name, ": the training split holds ", tokens, " tokens in ", D,
             " documents, fewer than one sequence of ", T + 1,
             " tokens; use more data, a larger training --split or a shorter --seq");
  SampleIndex ix;
  ix.samples_per_epoch = (tokens - 1) / T;
  const int64_t blocks =
      std::max<int64_t>(1, (min_samples + ix.samples_per_epoch - 1) / ix.samples_per_epoch);
  ix.num_samples = blocks * ix.samples_per_epoch;
  ix.epochs = 1;  // enough epochs that sample num_samples starts inside the stream
  while ((ix.epochs * tokens - 1) / T < ix.num_samples) ++ix.epochs;

  ix.doc_idx.resize(size_t(ix.epochs * D));
  for (int64_t e = 0; e < ix.epochs; ++e) {
    int32_t* ep = ix.doc_idx.data() + e * D;
    std::iota(ep, ep + D, 0);
    shuffle_in_place(ep, D, seed, stream_id({kDocShuffleTag, uint64_t(e)}));
  }

  // Megatron's build_sample_idx: sample i starts at stream token i*T, where sample i-1's T + 1
  // tokens end (so consecutive samples share one token).
  ix.sample_idx.resize(size_t(ix.num_samples + 1) * 2);
  int64_t pos = 0, off = 0;  // the stream position of token i*T
  while (doc_lengths[size_t(ix.doc_idx[size_t(pos)])] == 0) ++pos;
  for (int64_t i = 0; i <= ix.num_samples; ++i) {
    if (i > 0) {
      int64_t left = T;
      while (left > 0) {
        const int64_t rest = doc_lengths[size_t(ix.doc_idx[size_t(pos)])] - off;
        if (left < rest) {
          off += left;
          left = 0;
        } else {
          left -= rest;
          ++pos;
          off = 0;
          while (doc_lengths[size_t(ix.doc_idx[size_t(pos)])] == 0) ++pos;
        }
      }
    }
    ix.sample_idx[size_t(2 * i)] = pos;
    ix.sample_idx[size_t(2 * i + 1)] = off;
  }

  ix.shuffle.resize(size_t(ix.num_samples));
  std::iota(ix.shuffle.begin(), ix.shuffle.end(), int64_t{0});
  for (int64_t b = 0; b < blocks; ++b)
    shuffle_in_place(ix.shuffle.data() + b * ix.samples_per_epoch, ix.samples_per_epoch, seed,
                     stream_id({kSampleShuffleTag, uint64_t(b)}));
  return ix;
}

std::vector<int16_t> blend_assignment(const std::vector<double>& weights, int64_t n) {
  MOET_ASSERT(!weights.empty() && weights.size() < 32768);
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> w(weights.size());
  for (size_t d = 0; d < w.size(); ++d) w[d] = weights[d] / sum;
  std::vector<int64_t> taken(w.size(), 0);
  std::vector<int16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double at = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = w[0] * at - double(taken[0]);
    for (size_t d = 1; d < w.size(); ++d) {
      const double error = w[d] * at - double(taken[d]);
      if (error > best_error) best_error = error, best = d;
    }
    out[size_t(i)] = int16_t(best);
    ++taken[best];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

GptDataset::GptDataset(const std::string& prefix, int64_t model_vocab, uint64_t seed,
                       const DataSplit& split, int64_t vocab_scan_bytes)
    : data_(std::make_unique<IndexedDataset>(prefix)), vocab_(model_vocab), seed_(seed) {
  MOET_CHECK(model_vocab > 0, "dataset ", prefix, ": the vocabulary size must be positive");
  // Ids outside the model's vocabulary are refused up front where the tokens are few enough to
  // scan in about a second; a larger dataset is checked as it is read (copy_tokens).
  if (data_->bin_bytes() <= vocab_scan_bytes) {
    const auto [lo, hi] = data_->token_range();
    MOET_CHECK(lo >= 0 && hi < model_vocab, data_->bin_path(), ": token id ", lo < 0 ? lo : hi,
               " is outside the model's vocabulary of ", model_vocab,
               " (was the data tokenized for another model?)");
  }
  std::tie(train_end_, valid_end_) = split_document_ranges(split, data_->num_documents());
  MOET_CHECK(train_end_ > 0 || split.train == 0, prefix, ": ", data_->num_documents(),
             " documents leave the training split empty");
  valid_starts_.push_back(0);
  for (int64_t d = train_end_; d < valid_end_; ++d)
    valid_starts_.push_back(valid_starts_.back() + data_->sequence_length(d));
}

std::string GptDataset::describe() const {
  std::string s = str("Megatron data ", data_->name(), ": ", data_->num_tokens(), " ",
                      indexed_dtype_name(data_->dtype_code()), " tokens in ",
                      data_->num_documents(), " documents (", train_end_, " train, ",
                      valid_end_ - train_end_, " held out), seed ", seed_);
  if (index_.num_samples > 0)
    s += str("; sample index ", index_.num_samples, " samples, ", index_.epochs, " epochs, ",
             index_path_.empty() ? std::string("in memory")
                                 : (index_reused_ ? "reused " : "written ") + index_path_);
  return s;
}

void GptDataset::plan(const SampleLayout& layout) {
  layout_ = layout;
  prepare_samples(layout.total_samples(), layout.seq_len);
}

void GptDataset::prepare_samples(int64_t n, int64_t T) {
  MOET_CHECK(T > 0, "sequence length must be positive, got ", T);
  if (index_T_ == T && index_.num_samples >= n) return;
  std::vector<int32_t> lengths(static_cast<size_t>(train_end_));
  // Documents are sequences (Megatron's GPTDataset splits and shuffles sequences).
  for (int64_t d = 0; d < train_end_; ++d) lengths[size_t(d)] = data_->sequence_length(d);
  // The run length is no part of the key: sample i does not depend on it, so an index of more
  // samples serves a shorter run too.
  const std::string key = str("moet sample index v2; idx ", data_->idx_bytes(), " bytes fnv ",
                              data_->idx_fingerprint(), "; bin ", data_->bin_bytes(),
                              " bytes; documents [0, ", train_end_, "); seed ", seed_, "; seq ", T);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a(key));
  const std::string file = fs::path(data_->name()).filename().string() + "." + hash + ".sampleidx";
  std::vector<std::string> places = {data_->name() + "." + hash + ".sampleidx"};
  if (const std::string dir = user_cache_dir(); !dir.empty())
    places.push_back(dir + "/sampleidx/" + file);

  index_T_ = T;
  index_reused_ = false;
  index_path_.clear();
  for (const std::string& p : places)
    if (load_cached(p, key, lengths, T, index_) && index_.num_samples >= n) {
      index_path_ = p;
      index_reused_ = true;
      return;
    }
  index_ = build_sample_index(lengths, T, seed_, n, data_->name());
  const std::string bytes = serialise(index_, key);
  for (const std::string& p : places)
    if (write_atomically(p, bytes)) {
      index_path_ = p;
      return;
    }
}

void GptDataset::copy_tokens(int64_t doc, int64_t offset, int64_t n, int32_t* out) const {
  data_->read(doc, offset, n, out);
  for (int64_t i = 0; i < n; ++i)
    MOET_CHECK(out[i] >= 0 && out[i] < vocab_, data_->bin_path(), ": token id ", out[i],
               " in document ", doc, " is outside the model's vocabulary of ", vocab_,
               " (was the data tokenized for another model?)");
}

void GptDataset::read_sample(int64_t k, int64_t T, int32_t* out) const {
  MOET_ASSERT_MSG(index_T_ == T && k >= 0 && k < index_.num_samples, "sample ", k, " of ",
                  data_->name(), " is outside the planned index");
  const int64_t i = index_.shuffle[size_t(k)];
  int64_t pos = index_.sample_idx[size_t(2 * i)], off = index_.sample_idx[size_t(2 * i + 1)];
  int64_t left = T + 1;
  while (left > 0) {
    const int64_t doc = index_.doc_idx[size_t(pos)];
    const int64_t n = std::min<int64_t>(left, data_->sequence_length(doc) - off);
    copy_tokens(doc, off, n, out);
    out += n;
    left -= n;
    ++pos;
    off = 0;
  }
}

void GptDataset::fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count,
                                int64_t T, int32_t* out) const {
  MOET_ASSERT_MSG(step >= 0 && micro >= 0 && first_seq >= 0 && count > 0 && T == layout_.seq_len,
                  data_->name(), " read before plan() or with another layout");
  for (int64_t s = 0; s < count; ++s)
    read_sample(layout_.sample(step, micro, first_seq + s), T, out + s * (T + 1));
}

int64_t GptDataset::num_eval_samples(int64_t T) const {
  const int64_t tokens = valid_starts_.back();
  return tokens >= T + 1 ? (tokens - 1) / T : 0;
}

void GptDataset::read_eval_sample(int64_t j, int64_t T, int32_t* out) const {
  const int64_t n = num_eval_samples(T);
  MOET_CHECK(n > 0, data_->name(), ": the held-out documents hold ", valid_starts_.back(),
             " tokens, fewer than one sequence of ", T + 1,
             " tokens; use a larger validation --split or a shorter --seq");
  int64_t at = (j % n) * T;  // token offset into the validation stream
  auto it = std::upper_bound(valid_starts_.begin(), valid_starts_.end(), at) - 1;
  int64_t left = T + 1;
  while (left > 0) {
    const int64_t v = it - valid_starts_.begin(), off = at - *it;
    const int64_t len = *(it + 1) - *it, m = std::min(left, len - off);
    copy_tokens(train_end_ + v, off, m, out);
    out += m, left -= m, at += m;
    ++it;
  }
}

void GptDataset::eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out) const {
  if (!has_eval()) TokenDataset::eval_batch(index, B, T, out);  // throws
  for (int64_t b = 0; b < B; ++b) read_eval_sample(index * B + b, T, out + b * (T + 1));
}

int64_t GptDataset::num_eval_batches(int64_t B, int64_t T) const {
  MOET_CHECK(B > 0 && T > 0, "eval batch size (", B, ") and sequence length (", T,
             ") must be positive");
  return (num_eval_samples(T) + B - 1) / B;
}

// ---------------------------------------------------------------------------------------------

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<GptDataset>> parts,
                               std::vector<double> weights)
    : parts_(std::move(parts)), weights_(std::move(weights)) {
  MOET_CHECK(!parts_.empty() && parts_.size() == weights_.size() && parts_.size() < 32768,
             "a blend needs one weight per dataset");
  const double sum = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  MOET_CHECK(sum > 0, "the blend's weights sum to zero");
  for (double& w : weights_) w /= sum;
}

std::string BlendedDataset::describe() const {
  std::string s = "blend of " + std::to_string(parts_.size()) + " datasets:";
  for (size_t d = 0; d < parts_.size(); ++d)
    s += str(d ? "; " : " ", weights_[d], " x ", parts_[d]->describe());
  return s;
}

void BlendedDataset::plan(const SampleLayout& layout) {
  layout_ = layout;
  const int64_t n = layout.total_samples();
  dataset_ = blend_assignment(weights_, n);
  within_.resize(size_t(n));
  std::vector<int64_t> taken(parts_.size(), 0);
  for (int64_t i = 0; i < n; ++i) within_[size_t(i)] = taken[size_t(dataset_[size_t(i)])]++;
  for (size_t d = 0; d < parts_.size(); ++d)
    if (taken[d] > 0 || weights_[d] > 0) parts_[d]->prepare_samples(taken[d], layout.seq_len);
}

std::pair<int, int64_t> BlendedDataset::locate(int64_t n) const {
  MOET_ASSERT_MSG(n >= 0 && n < int64_t(dataset_.size()), "blend sample ", n,
                  " is outside the planned ", dataset_.size());
  return {dataset_[size_t(n)], within_[size_t(n)]};
}

void BlendedDataset::fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count,
                                    int64_t T, int32_t* out) const {
  MOET_ASSERT_MSG(step >= 0 && micro >= 0 && first_seq >= 0 && count > 0 && T == layout_.seq_len,
                  "blended data read before plan() or with another layout");
  for (int64_t s = 0; s < count; ++s) {
    const auto [d, k] = locate(layout_.sample(step, micro, first_seq + s));
    parts_[size_t(d)]->read_sample(k, T, out + s * (T + 1));
  }
}

bool BlendedDataset::has_eval() const {
  for (const auto& p : parts_)
    if (p->has_eval()) return true;
  return false;
}

void BlendedDataset::eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out) const {
  if (!has_eval()) TokenDataset::eval_batch(index, B, T, out);  // throws
  std::vector<double> w(parts_.size());
  for (size_t d = 0; d < parts_.size(); ++d)
    w[d] = parts_[d]->num_eval_samples(T) > 0 ? weights_[d] : 0.0;
  if (std::accumulate(w.begin(), w.end(), 0.0) <= 0)
    parts_[0]->read_eval_sample(0, T, out);  // throws: no held-out sequence anywhere
  const std::vector<int16_t> who = blend_assignment(w, (index + 1) * B);
  std::vector<int64_t> taken(parts_.size(), 0);
  for (int64_t j = 0; j < (index + 1) * B; ++j) {
    const auto d = size_t(who[size_t(j)]);
    if (j >= index * B) parts_[d]->read_eval_sample(taken[d], T, out + (j - index * B) * (T + 1));
    ++taken[d];
  }
}

int64_t BlendedDataset::num_eval_batches(int64_t B, int64_t T) const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p->num_eval_samples(T);
  return (n + B - 1) / B;
}

std::pair<std::vector<std::string>, std::vector<double>> parse_data_blend(const std::string& spec) {
  std::vector<std::string> fields;
  std::istringstream ss(spec);
  for (std::string f; ss >> f;) fields.push_back(f);
  MOET_CHECK(!fields.empty(), "--data is empty");
  if (fields.size() == 1) return {{fields[0]}, {1.0}};
  MOET_CHECK(fields.size() % 2 == 0, "--data '", spec, "': ", fields.size(),
             " fields; a blend is pairs of WEIGHT PREFIX (e.g. \"0.7 A 0.3 B\")");
  std::vector<std::string> prefixes;
  std::vector<double> weights;
  for (size_t i = 0; i < fields.size(); i += 2) {
    char* end = nullptr;
    const double w = std::strtod(fields[i].c_str(), &end);
    MOET_CHECK(end && *end == '\0' && std::isfinite(w) && w >= 0, "--data '", spec, "': weight '",
               fields[i], "' of ", fields[i + 1], " is not a non-negative number");
    weights.push_back(w);
    prefixes.push_back(fields[i + 1]);
  }
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  MOET_CHECK(sum > 0, "--data '", spec, "': the weights sum to zero");
  for (double& w : weights) w /= sum;
  return {prefixes, weights};
}

}  // namespace moet
