// Megatron indexed datasets: writer/reader round trip, every bad input as one error line, the
// GPT sample index (packing, epochs, shuffles, cache), blending, the split, data preparation
// and the background prefetcher.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "data/byte_tokenizer.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/open_dataset.h"
#include "data/prefetch.h"
#include "data/prepare.h"
#include "error_of.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

using test::error_of;

// A temporary directory whose sample-index cache directory lies inside it.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("moet_idx") { ::setenv("MOET_CACHE_DIR", path("cache").c_str(), 1); }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Documents of seeded random lengths in [min_len, max_len] and tokens below vocab.
std::vector<std::vector<int32_t>> random_docs(int n, int min_len, int max_len, int vocab,
                                              uint64_t seed) {
  const CounterRng rng(seed, 1);
  std::vector<std::vector<int32_t>> docs(static_cast<size_t>(n));
  uint64_t k = 0;
  for (auto& d : docs) {
    d.resize(size_t(min_len) + rng.below(k++, uint64_t(max_len - min_len + 1)));
    for (auto& t : d) t = int32_t(rng.below(k++, uint64_t(vocab)));
  }
  return docs;
}

std::string write_docs(const TempDir& dir, const std::string& name,
                       const std::vector<std::vector<int32_t>>& docs,
                       IndexedDType dtype = IndexedDType::kU16) {
  const std::string prefix = dir.path(name);
  IndexedDatasetWriter w(prefix, dtype, true);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
  return prefix;
}

// The tokens of the stream of documents in doc_idx order.
std::vector<int32_t> stream_of(const SampleIndex& ix,
                               const std::vector<std::vector<int32_t>>& docs) {
  std::vector<int32_t> s;
  for (int32_t d : ix.doc_idx) s.insert(s.end(), docs[size_t(d)].begin(), docs[size_t(d)].end());
  return s;
}

TEST(IndexedDataset, RoundTripBothDtypes) {
  TempDir dir;
  for (IndexedDType dtype : {IndexedDType::kU16, IndexedDType::kI32}) {
    const int vocab = dtype == IndexedDType::kU16 ? 65000 : 200000;
    auto docs = random_docs(37, 0, 50, vocab, 5);
    const std::string prefix = write_docs(dir, "rt", docs, dtype);
    const IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype_code(), uint8_t(dtype));
    ASSERT_EQ(ds.num_sequences(), 37);
    ASSERT_EQ(ds.num_documents(), 37);
    int64_t total = 0;
    for (int64_t i = 0; i < 37; ++i) {
      EXPECT_EQ(ds.sequence(i), docs[size_t(i)]);
      EXPECT_EQ(ds.document_boundary(i), i);
      total += int64_t(docs[size_t(i)].size());
    }
    EXPECT_EQ(ds.document_boundary(37), 37);
    EXPECT_EQ(ds.num_tokens(), total);
    EXPECT_EQ(ds.bin_bytes(), total * indexed_dtype_bytes(uint8_t(dtype)));
    EXPECT_EQ(ds.idx_bytes(), 34 + 37 * 12 + 38 * 8);
  }
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"rt.bin", "rt.idx"}));  // no temporaries
}

TEST(IndexedDataset, OptimalDtypeIsMegatrons) {
  EXPECT_EQ(optimal_indexed_dtype(257), IndexedDType::kU16);
  EXPECT_EQ(optimal_indexed_dtype(65499), IndexedDType::kU16);
  EXPECT_EQ(optimal_indexed_dtype(65500), IndexedDType::kI32);
  EXPECT_EQ(optimal_indexed_dtype(129280), IndexedDType::kI32);
  EXPECT_EQ(indexed_dtype_name(8), "uint16");
}

TEST(IndexedDataset, WriterRefusesToOverwriteAndLeavesNothingWhenAbandoned) {
  TempDir dir;
  const std::string prefix = write_docs(dir, "a", {{1, 2, 3}});
  const std::string before = slurp(prefix + ".bin") + slurp(prefix + ".idx");
  const std::string e =
      error_of([&] { IndexedDatasetWriter w(prefix, IndexedDType::kU16, false); });
  EXPECT_NE(e.find("a.bin' already exists"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  {
    IndexedDatasetWriter w(prefix, IndexedDType::kU16, true);  // abandoned: never finished
    w.add_document({4, 5});
  }
  EXPECT_EQ(slurp(prefix + ".bin") + slurp(prefix + ".idx"), before);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a.bin", "a.idx"}));
  {
    IndexedDatasetWriter w(dir.path("fresh"), IndexedDType::kU16, false);
    w.add_document({4, 5});
  }
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a.bin", "a.idx"}));
  EXPECT_NE(error_of([&] {
              IndexedDatasetWriter w(dir.path("b"), IndexedDType::kU16, false);
              w.add_document({70000});
            }).find("does not fit dtype uint16"),
            std::string::npos);
}

// Writes a copy of a good .idx with `edit` applied, beside the good .bin, and returns the error
// of opening it ("" when it opens).
std::string open_edited(const TempDir& dir, const std::string& good,
                        const std::function<void(std::string&)>& edit) {
  std::string idx = slurp(good + ".idx");
  edit(idx);
  const std::string p = dir.path("bad");
  dir.write("bad.idx", idx);
  fs::copy_file(good + ".bin", p + ".bin", fs::copy_options::overwrite_existing);
  return error_of([&] { IndexedDataset ds(p); });
}

template <typename T>
void poke(std::string& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

TEST(IndexedDataset, EveryBadInputIsOneLineNamingTheFile) {
  TempDir dir;
  const std::string good = write_docs(dir, "good", {{1, 2, 3}, {4, 5}, {6}});
  // header 34 bytes; lengths at 34, pointers at 46, document index at 70
  const std::vector<std::pair<std::string, std::function<void(std::string&)>>> cases = {
      {"not a Megatron index", [](std::string& b) { b[0] = 'X'; }},
      {"not a Megatron index", [](std::string& b) { b.resize(20); }},
      {"index version 2", [](std::string& b) { poke<uint64_t>(b, 9, 2); }},
      {"unknown dtype code 9", [](std::string& b) { b[17] = 9; }},
      {"dtype float32 holds no token ids", [](std::string& b) { b[17] = 7; }},
      {"need more than the file's", [](std::string& b) { poke<uint64_t>(b, 18, 1ull << 60); }},
      {"make 102 bytes, but the file has 110", [](std::string& b) { b += "12345678"; }},
      {"sequences and 5 document boundaries", [](std::string& b) { poke<uint64_t>(b, 26, 5); }},
      {"past the end of", [](std::string& b) { poke<int32_t>(b, 34 + 4, 1000); }},
      {"past the end of", [](std::string& b) { poke<int64_t>(b, 46 + 16, 1 << 20); }},
      {"negative length", [](std::string& b) { poke<int32_t>(b, 34, -1); }},
      {"starts with 1, not 0", [](std::string& b) { poke<int64_t>(b, 70, 1); }},
      {"out of order",
       [](std::string& b) { poke<int64_t>(b, 70 + 8, 3), poke<int64_t>(b, 86, 2); }},
      {"ends at sequence 2", [](std::string& b) { poke<int64_t>(b, 70 + 24, 2); }},
  };
  for (const auto& [want, edit] : cases) {
    const std::string e = open_edited(dir, good, edit);
    EXPECT_NE(e.find(want), std::string::npos) << "want '" << want << "', got: " << e;
    EXPECT_NE(e.find("bad.idx"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_EQ(open_edited(dir, good, [](std::string&) {}), "");
  fs::remove(dir.path("bad.bin"));
  const std::string e = error_of([&] { IndexedDataset ds(dir.path("bad")); });
  EXPECT_NE(e.find("cannot open Megatron token file"), std::string::npos) << e;
  EXPECT_NE(e.find("bad.bin"), std::string::npos) << e;
  // The good pair is untouched by all this.
  EXPECT_EQ(IndexedDataset(good).sequence(1), (std::vector<int32_t>{4, 5}));
}

TEST(GptDataset, TokenAboveTheVocabularyIsRefusedUpFront) {
  TempDir dir;
  const std::string prefix = write_docs(dir, "v", {{1, 2, 3}, {4, 5, 300, 6}});
  const std::string e = error_of([&] { GptDataset ds(prefix, 257, 1, DataSplit{100, 0, 0}); });
  EXPECT_NE(e.find("v.bin: token id 300 is outside the model's vocabulary of 257"),
            std::string::npos)
      << e;
  GptDataset fits(prefix, 301, 1, DataSplit{100, 0, 0});
}

TEST(GptDataset, TokenAboveTheVocabularyIsAnErrorWhenRead) {
  TempDir dir;
  const std::string prefix = write_docs(dir, "v", {{1, 2, 3, 4, 5, 6, 7, 8, 9, 300}});
  GptDataset ds(prefix, 257, 1, DataSplit{100, 0, 0}, 0);  // a dataset too large to scan
  ds.plan(SampleLayout{1, 1, 1, 3});
  std::vector<int32_t> out(4);
  bool reached = false;
  for (int64_t k = 0; k < ds.index().num_samples; ++k) {
    const std::string e = error_of([&] { ds.read_sample(k, 3, out.data()); });
    if (e.empty()) continue;
    reached = true;
    EXPECT_NE(e.find("v.bin: token id 300 in document 0 is outside the model's vocabulary of 257"),
              std::string::npos)
        << e;
  }
  EXPECT_TRUE(reached);
}

TEST(GptDataset, DatasetTooSmallForOneSequence) {
  TempDir dir;
  const std::string prefix = write_docs(dir, "s", {{1, 2, 3}, {4, 5}});
  GptDataset ds(prefix, 257, 1, DataSplit{100, 0, 0});
  const std::string e = error_of([&] { ds.plan(SampleLayout{1, 2, 3, 8}); });
  EXPECT_NE(e.find("holds 5 tokens in 2 documents, fewer than one sequence of 9 tokens"),
            std::string::npos)
      << e;
}

TEST(SampleIndex, PackingUsesEveryTokenOncePerEpochAndSamplesOverlapByOne) {
  const auto docs = random_docs(23, 0, 40, 100, 7);
  std::vector<int32_t> lengths;
  for (const auto& d : docs) lengths.push_back(int32_t(d.size()));
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const int64_t T = 16;
  const SampleIndex ix = build_sample_index(lengths, T, 3, 100, "test");
  EXPECT_EQ(ix.samples_per_epoch, (tokens - 1) / T);
  EXPECT_GE(ix.num_samples, 100);
  EXPECT_EQ(ix.num_samples % ix.samples_per_epoch, 0);
  EXPECT_LE(ix.num_samples * T + 1, ix.epochs * tokens);  // every sample inside the stream
  // Each epoch is a permutation of the documents, and epochs differ.
  const int64_t D = int64_t(docs.size());
  for (int64_t e = 0; e < ix.epochs; ++e) {
    std::vector<int32_t> ep(ix.doc_idx.begin() + e * D, ix.doc_idx.begin() + (e + 1) * D);
    std::sort(ep.begin(), ep.end());
    for (int32_t i = 0; i < D; ++i) EXPECT_EQ(ep[size_t(i)], i);
  }
  ASSERT_GE(ix.epochs, 2);
  EXPECT_FALSE(std::equal(ix.doc_idx.begin(), ix.doc_idx.begin() + D, ix.doc_idx.begin() + D));
  // Sample i is tokens [i*T, i*T + T] of the stream: where sample_idx points.
  const std::vector<int32_t> stream = stream_of(ix, docs);
  std::vector<int64_t> starts(size_t(ix.epochs * D) + 1, 0);
  for (size_t p = 0; p < size_t(ix.epochs * D); ++p)
    starts[p + 1] = starts[p] + lengths[size_t(ix.doc_idx[p])];
  for (int64_t i = 0; i <= ix.num_samples; ++i) {
    const int64_t pos = ix.sample_idx[size_t(2 * i)], off = ix.sample_idx[size_t(2 * i + 1)];
    ASSERT_LT(off, lengths[size_t(ix.doc_idx[size_t(pos)])]);
    EXPECT_EQ(starts[size_t(pos)] + off, i * T) << "sample " << i;
  }
  // The shuffle permutes each epoch's block of samples within itself.
  for (int64_t b = 0; b < ix.num_samples / ix.samples_per_epoch; ++b) {
    std::vector<int64_t> blk(ix.shuffle.begin() + b * ix.samples_per_epoch,
                             ix.shuffle.begin() + (b + 1) * ix.samples_per_epoch);
    std::sort(blk.begin(), blk.end());
    for (int64_t k = 0; k < ix.samples_per_epoch; ++k)
      EXPECT_EQ(blk[size_t(k)], b * ix.samples_per_epoch + k);
  }
  // Epoch 0's samples cover the first epoch's tokens once (but the last < T, which the next
  // epoch's first sample starts with).
  EXPECT_GT(ix.samples_per_epoch * T, tokens - 1 - T);
}

TEST(SampleIndex, DeterministicBySeedAndIndependentOfTheRunLength) {
  const auto docs = random_docs(40, 1, 30, 100, 9);
  std::vector<int32_t> lengths;
  for (const auto& d : docs) lengths.push_back(int32_t(d.size()));
  const SampleIndex a = build_sample_index(lengths, 8, 11, 10, "t");
  const SampleIndex b = build_sample_index(lengths, 8, 11, 10, "t");
  const SampleIndex c = build_sample_index(lengths, 8, 12, 10, "t");
  const SampleIndex longer = build_sample_index(lengths, 8, 11, 1000, "t");
  EXPECT_EQ(a.doc_idx, b.doc_idx);
  EXPECT_EQ(a.shuffle, b.shuffle);
  EXPECT_NE(a.doc_idx, c.doc_idx);
  ASSERT_GT(longer.num_samples, a.num_samples);
  EXPECT_TRUE(std::equal(a.shuffle.begin(), a.shuffle.end(), longer.shuffle.begin()));
  EXPECT_TRUE(std::equal(a.sample_idx.begin(), a.sample_idx.end(), longer.sample_idx.begin()));
  EXPECT_TRUE(std::equal(a.doc_idx.begin(), a.doc_idx.end(), longer.doc_idx.begin()));
}

TEST(SampleIndex, ZeroLengthDocumentsAreSkipped) {
  const std::vector<int32_t> lengths = {0, 3, 0, 0, 5, 0, 2};
  const SampleIndex ix = build_sample_index(lengths, 3, 1, 5, "t");
  for (int64_t i = 0; i <= ix.num_samples; ++i)
    EXPECT_GT(lengths[size_t(ix.doc_idx[size_t(ix.sample_idx[size_t(2 * i)])])], 0);
}

TEST(GptDataset, SamplesAreStreamWindowsAndRanksReadTheirSlice) {
  TempDir dir;
  const auto docs = random_docs(50, 1, 30, 257, 4);
  const std::string prefix = write_docs(dir, "g", docs);
  GptDataset ds(prefix, 257, 5, DataSplit{90, 10, 0});
  EXPECT_EQ(ds.train_documents(), 45);
  EXPECT_EQ(ds.valid_documents(), 5);
  const int64_t T = 12;
  const SampleLayout layout{2, 4, 30, T};
  ds.plan(layout);
  std::vector<std::vector<int32_t>> train(docs.begin(), docs.begin() + 45);
  const std::vector<int32_t> stream = stream_of(ds.index(), train);
  std::vector<int32_t> all(4 * (T + 1)), part(2 * (T + 1));
  for (int64_t step : {0, 7, 29})
    for (int64_t micro = 0; micro < 2; ++micro) {
      ds.fill_sequences(step, micro, 0, 4, T, all.data());
      ds.fill_sequences(step, micro, 2, 2, T, part.data());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 2 * (T + 1)));
      for (int64_t s = 0; s < 4; ++s) {
        const int64_t i = ds.index().shuffle[size_t(layout.sample(step, micro, s))];
        EXPECT_TRUE(std::equal(all.begin() + s * (T + 1), all.begin() + (s + 1) * (T + 1),
                               stream.begin() + i * T));
      }
    }
  // Held-out samples come from the validation documents, in order.
  std::vector<int32_t> valid;
  for (size_t d = 45; d < 50; ++d) valid.insert(valid.end(), docs[d].begin(), docs[d].end());
  ASSERT_TRUE(ds.has_eval());
  const int64_t n = ds.num_eval_samples(T);
  EXPECT_EQ(n, (int64_t(valid.size()) - 1) / T);
  std::vector<int32_t> ev(2 * (T + 1));
  ds.eval_batch(0, 2, T, ev.data());
  EXPECT_TRUE(std::equal(ev.begin(), ev.end() - (T + 1), valid.begin()));
  EXPECT_TRUE(std::equal(ev.begin() + (T + 1), ev.end(), valid.begin() + T));
}

TEST(GptDataset, SampleIndexCacheIsReusedAndInvalidated) {
  TempDir dir;
  const auto docs = random_docs(30, 1, 20, 257, 2);
  const std::string prefix = write_docs(dir, "c", docs);
  GptDataset a(prefix, 257, 5, DataSplit{});
  a.prepare_samples(100, 8);
  EXPECT_FALSE(a.index_reused());
  ASSERT_EQ(fs::path(a.index_path()).parent_path(), fs::path(prefix).parent_path());
  EXPECT_TRUE(fs::exists(a.index_path()));
  GptDataset b(prefix, 257, 5, DataSplit{});
  b.prepare_samples(100, 8);
  EXPECT_TRUE(b.index_reused());
  EXPECT_EQ(b.index_path(), a.index_path());
  EXPECT_EQ(b.index().shuffle, a.index().shuffle);
  EXPECT_EQ(b.index().sample_idx, a.index().sample_idx);
  // A shorter run reuses it; a longer one extends it in the same file, whose first samples are
  // the same.
  GptDataset shorter(prefix, 257, 5, DataSplit{});
  shorter.prepare_samples(10, 8);
  EXPECT_TRUE(shorter.index_reused());
  GptDataset longer(prefix, 257, 5, DataSplit{});
  longer.prepare_samples(1000, 8);
  EXPECT_FALSE(longer.index_reused());
  EXPECT_EQ(longer.index_path(), a.index_path());
  EXPECT_TRUE(std::equal(a.index().shuffle.begin(), a.index().shuffle.end(),
                         longer.index().shuffle.begin()));
  GptDataset again(prefix, 257, 5, DataSplit{});
  again.prepare_samples(100, 8);
  EXPECT_TRUE(again.index_reused());
  EXPECT_EQ(again.index().num_samples, longer.index().num_samples);
  // Another seed or sequence length: another file.
  GptDataset c(prefix, 257, 6, DataSplit{});
  c.prepare_samples(100, 8);
  EXPECT_FALSE(c.index_reused());
  EXPECT_NE(c.index_path(), a.index_path());
  // A damaged cache is rebuilt, never trusted.
  const std::string cached = slurp(a.index_path());
  dir.write(fs::path(a.index_path()).filename(), cached.substr(0, cached.size() - 8));
  GptDataset d(prefix, 257, 5, DataSplit{});
  d.prepare_samples(100, 8);
  EXPECT_FALSE(d.index_reused());
  EXPECT_EQ(d.index().shuffle, a.index().shuffle);
  GptDataset sixth(prefix, 257, 5, DataSplit{});
  sixth.prepare_samples(100, 8);
  EXPECT_TRUE(sixth.index_reused());
  // Data rewritten under the same name: the old index does not match.
  auto docs2 = docs;
  docs2[0].push_back(1);
  write_docs(dir, "c", docs2);
  GptDataset e(prefix, 257, 5, DataSplit{});
  e.prepare_samples(100, 8);
  EXPECT_FALSE(e.index_reused());
  EXPECT_NE(e.index_path(), a.index_path());
}

TEST(Blend, SharesFollowTheWeightsAsMegatronsGreedyRule) {
  const std::vector<double> w = {0.5, 0.3, 0.2};
  const auto who = blend_assignment(w, 10000);
  std::vector<int64_t> count(3, 0);
  for (int64_t i = 0; i < 10000; ++i) {
    ++count[size_t(who[size_t(i)])];
    for (size_t d = 0; d < 3; ++d)  // the greedy rule never lags a weight by more than a sample
      ASSERT_LE(std::abs(double(count[d]) - w[d] * double(i + 1)), 2.0) << i;
  }
  EXPECT_EQ(count, (std::vector<int64_t>{5000, 3000, 2000}));
  // The first samples as helpers.cpp's rule gives them (the error at sample 0 uses 1).
  const auto first = blend_assignment({0.7, 0.3}, 10);
  EXPECT_EQ(std::vector<int16_t>(first.begin(), first.end()),
            (std::vector<int16_t>{0, 1, 0, 0, 1, 0, 0, 1, 0, 0}));
}

TEST(Blend, ParsesWeightsAndRejectsBadOnesInOneLine) {
  auto [p, w] = parse_data_blend("0.7 A 0.3 B");
  EXPECT_EQ(p, (std::vector<std::string>{"A", "B"}));
  EXPECT_DOUBLE_EQ(w[0], 0.7);
  std::tie(p, w) = parse_data_blend("2 A 6 B");
  EXPECT_DOUBLE_EQ(w[1], 0.75);
  std::tie(p, w) = parse_data_blend("A");
  EXPECT_EQ(p.size(), 1u);
  EXPECT_NE(error_of([] { parse_data_blend("0.7 A 0.3"); }).find("3 fields"), std::string::npos);
  EXPECT_NE(error_of([] { parse_data_blend("x A 1 B"); }).find("weight 'x' of A"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_data_blend("-1 A 2 B"); }).find("non-negative"), std::string::npos);
  EXPECT_NE(error_of([] { parse_data_blend("0 A 0 B"); }).find("sum to zero"), std::string::npos);
  EXPECT_NE(error_of([] { parse_data_blend("inf A 1 B"); }).find("weight 'inf'"),
            std::string::npos);
}

TEST(Blend, BlendedDatasetReadsEachPartsSamples) {
  TempDir dir;
  const std::string a = write_docs(dir, "a", random_docs(20, 5, 30, 100, 1));
  const std::string b = write_docs(dir, "b", random_docs(20, 5, 30, 100, 2));
  const ByteTokenizer tok;
  auto ds = open_token_dataset("0.25 " + a + " 0.75 " + b, tok, 257, 3, "100,0");
  const auto* blend = dynamic_cast<const BlendedDataset*>(ds.get());
  ASSERT_NE(blend, nullptr);
  const int64_t T = 8;
  ds->plan(SampleLayout{1, 4, 25, T});
  GptDataset pa(a, 257, 3, DataSplit{100, 0, 0}), pb(b, 257, 3, DataSplit{100, 0, 0});
  pa.prepare_samples(100, T);
  pb.prepare_samples(100, T);
  std::vector<int32_t> got(4 * (T + 1)), want(T + 1);
  int64_t from_b = 0;
  for (int64_t step = 0; step < 25; ++step) {
    ds->fill_sequences(step, 0, 0, 4, T, got.data());
    for (int64_t s = 0; s < 4; ++s) {
      const auto [d, k] = blend->locate(step * 4 + s);
      (d == 0 ? pa : pb).read_sample(k, T, want.data());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + s * (T + 1)));
      from_b += d;
    }
  }
  EXPECT_EQ(from_b, 75);
}

TEST(Split, MegatronsRoundedDocumentRanges) {
  EXPECT_EQ(split_document_ranges(parse_data_split("95,5"), 100),
            std::make_pair(int64_t{95}, int64_t{100}));
  EXPECT_EQ(split_document_ranges(parse_data_split("969,30,1"), 1000),
            std::make_pair(int64_t{969}, int64_t{999}));
  EXPECT_EQ(split_document_ranges(parse_data_split("1,1"), 3),
            std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_NE(error_of([] { parse_data_split("95"); }).find("two or three"), std::string::npos);
  EXPECT_NE(error_of([] { parse_data_split("a,5"); }).find("'a'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_data_split("0,0"); }).find("no split any documents"),
            std::string::npos);
  // all held out: what moet eval takes for an external file (moet train refuses it)
  EXPECT_EQ(split_document_ranges(parse_data_split("0,100"), 10),
            std::make_pair(int64_t{0}, int64_t{10}));
}

TEST(OpenTokenDataset, TellsPrefixesFromTextAndNamesWhatIsMissing) {
  TempDir dir;
  const std::string prefix = write_docs(dir, "p", random_docs(10, 5, 30, 100, 1));
  const std::string text = dir.write("t.txt", "hello world\n%\nsecond document here\n");
  const ByteTokenizer tok;
  EXPECT_NE(dynamic_cast<GptDataset*>(open_token_dataset(prefix, tok, 257, 1).get()), nullptr);
  EXPECT_NE(dynamic_cast<GptDataset*>(open_token_dataset(prefix + ".idx", tok, 257, 1).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<GptDataset*>(open_token_dataset("1 " + prefix, tok, 257, 1).get()),
            nullptr);
  EXPECT_NE(dynamic_cast<TextDataset*>(open_token_dataset(text, tok, 257, 1).get()), nullptr);
  std::string e = error_of([&] { open_token_dataset(dir.path("nothing"), tok, 257, 1); });
  EXPECT_NE(e.find("nothing.idx' does not exist"), std::string::npos) << e;
  e = error_of([&] { open_token_dataset("0.5 " + prefix + " 0.5 " + dir.path("q"), tok, 257, 1); });
  EXPECT_NE(e.find("q.idx' does not exist"), std::string::npos) << e;
}

TEST(Prefetcher, GivesWhatTheDatasetFillsAndRethrowsItsErrors) {
  const MockDataset ds(100, 7);
  const int64_t A = 2, B = 3, T = 5, n = A * B * (T + 1);
  BatchPrefetcher pf(ds, 4, 12, A, 6, B, T, 2);
  std::vector<int32_t> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  for (int64_t step = 4; step < 12; ++step) {
    EXPECT_GE(pf.take(step, got.data()), 0.0);
    for (int64_t a = 0; a < A; ++a)
      ds.fill_sequences(step, a, 6, B, T, want.data() + a * B * (T + 1));
    EXPECT_EQ(got, want) << step;
  }
  TempDir dir;
  const std::string prefix = write_docs(dir, "v", {{1, 2, 3, 4, 5, 6, 7, 8, 9, 300}});
  GptDataset bad(prefix, 257, 1, DataSplit{100, 0, 0}, 0);  // too large to scan: read-time error
  bad.plan(SampleLayout{1, 1, 20, 4});
  BatchPrefetcher pb(bad, 0, 20, 1, 0, 1, 4, 2);
  std::string e;
  for (int64_t step = 0; step < 20 && e.empty(); ++step)
    e = error_of([&] { pb.take(step, got.data()); });
  EXPECT_NE(e.find("token id 300"), std::string::npos) << e;
}

std::string gzip(const std::string& text) {
  uLongf n = compressBound(text.size()) + 32;
  std::string out(n, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = uInt(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(Prepare, TextJsonlAndGzipInInputOrderWithBadLinesCounted) {
  TempDir dir;
  // Several chunks of JSONL so that workers finish out of order.
  std::string jsonl, gz_text;
  std::vector<std::string> expect;
  for (int i = 0; i < 30000; ++i) {
    const std::string doc = "document number " + std::to_string(i) + " with some words";
    jsonl += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + doc + "\"}\n";
    expect.push_back(doc);
    if (i == 100) jsonl += "{not json\n";
    if (i == 200) jsonl += "[1, 2]\n\n";
    if (i == 300) jsonl += "{\"content\": \"x\"}\n";
  }
  dir.write("a.txt", "first text\n%\nsecond text\n");
  dir.write("b.jsonl", jsonl);
  dir.write("c.jsonl.gz", gzip("{\"text\": \"zipped one\"}\n{\"text\": \"zipped two\"}"));
  PrepareOptions o;
  o.inputs = {dir.path("a.txt"), dir.path("b.jsonl"), dir.path("*.gz")};
  o.output = dir.path("out");
  o.workers = 3;
  const PrepareResult r = prepare_data(o, nullptr);
  EXPECT_EQ(r.bad_lines, 3);
  EXPECT_EQ(r.dtype, "uint16");
  std::vector<std::string> docs = {"first text\n", "second text\n"};
  docs.insert(docs.end(), expect.begin(), expect.end());
  docs.push_back("zipped one");
  docs.push_back("zipped two");
  const IndexedDataset ds(o.output);
  ASSERT_EQ(ds.num_documents(), int64_t(docs.size()));
  EXPECT_EQ(r.documents, int64_t(docs.size()));
  const ByteTokenizer tok;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<int32_t> want = tok.encode(docs[i]);
    want.push_back(ByteTokenizer::kEod);
    ASSERT_EQ(ds.sequence(int64_t(i)), want) << i;
  }
  // Refuses to overwrite; --on-bad-line stop names the line and leaves the old files.
  const std::string before = slurp(o.output + ".idx");
  std::string e = error_of([&] { prepare_data(o, nullptr); });
  EXPECT_NE(e.find("already exists"), std::string::npos) << e;
  o.overwrite = true;
  o.on_bad_line = "stop";
  e = error_of([&] { prepare_data(o, nullptr); });
  EXPECT_NE(e.find("b.jsonl:102: not valid JSON"), std::string::npos) << e;
  EXPECT_EQ(slurp(o.output + ".idx"), before);
  for (const std::string& n : dir.names()) EXPECT_EQ(n.find(".tmp-"), std::string::npos) << n;
}

TEST(Prepare, DocumentBoundariesAndMissingInputs) {
  TempDir dir;
  dir.write("t.txt", "one\n\n\ntwo\n  \nthree\n%\nfour\n");
  PrepareOptions o;
  o.inputs = {dir.path("t.txt")};
  o.output = dir.path("blank");
  o.doc_boundary = DocBoundary::kBlankLine;
  EXPECT_EQ(prepare_data(o, nullptr).documents, 3);
  o.output = dir.path("file");
  o.doc_boundary = DocBoundary::kFile;
  EXPECT_EQ(prepare_data(o, nullptr).documents, 1);
  o.output = dir.path("pct");
  o.doc_boundary = DocBoundary::kPercent;
  EXPECT_EQ(prepare_data(o, nullptr).documents, 2);
  o.inputs = {dir.path("missing.jsonl")};
  EXPECT_NE(error_of([&] { prepare_data(o, nullptr); }).find("missing.jsonl' does not exist"),
            std::string::npos);
  o.inputs = {dir.path("*.nothing")};
  EXPECT_NE(error_of([&] { prepare_data(o, nullptr); }).find("matches no file"), std::string::npos);
}

}  // namespace
