// Byte tokenizer, counter-based RNG, mock and text datasets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "data/byte_tokenizer.h"
#include "data/dataset.h"
#include "error_of.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

using test::error_of;

using test::TempDir;

// A text of `n` distinct-looking lines.
std::string sample_text(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "line " + std::to_string(i * 7919 % 10007) + " of the text\n";
  return s;
}

}  // namespace

// --- RNG --------------------------------------------------------------------------------------

TEST(Rng, PhiloxKnownAnswers) {
  // Random123 tests/kat_vectors, "philox4x32 10" lines: counter, key -> result.
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, DistributionsLookRight) {
  const CounterRng rng(123, stream_id({1, 2, 3}));
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0;
  std::vector<int> counts(7, 0);
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal(i);
    sum += z;
    sum2 += z * z;
    const double u = rng.uniform(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    usum += u;
    const uint64_t k = rng.below(i, 7);
    ASSERT_LT(k, 7u);
    ++counts[k];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);
  EXPECT_NEAR(usum / n, 0.5, 0.005);
  for (int c : counts) EXPECT_NEAR(c, n / 7.0, 0.03 * n / 7.0);
  // Pure functions of (seed, stream, index).
  EXPECT_EQ(rng.u64(5), CounterRng(123, stream_id({1, 2, 3})).u64(5));
  EXPECT_NE(rng.u64(5), CounterRng(124, stream_id({1, 2, 3})).u64(5));
  EXPECT_NE(rng.u64(5), CounterRng(123, stream_id({1, 2, 4})).u64(5));
  EXPECT_NE(stream_id({1, 2}), stream_id({2, 1}));
  EXPECT_NE(stream_id({0}), stream_id({0, 0}));
}

// --- tokenizer --------------------------------------------------------------------------------

TEST(ByteTokenizer, RoundTripAndEod) {
  const ByteTokenizer tok;
  std::string text = "Hello, world!\n\xc3\xa9t\xc3\xa9";  // UTF-8 bytes included
  text.push_back('\0');
  text.push_back(static_cast<char>(0xff));
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'H');
  EXPECT_EQ(ids[ids.size() - 1], 255);
  EXPECT_EQ(ids[ids.size() - 2], 0);
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 256);
  EXPECT_EQ(tok.decode(ids), text);

  std::vector<int32_t> with_eod = tok.encode("ab");
  with_eod.push_back(ByteTokenizer::kEod);
  tok.encode_append("cd", with_eod);
  EXPECT_EQ(tok.decode(with_eod), "abcd");
  EXPECT_EQ(tok.decode(with_eod, "<|eod|>"), "ab<|eod|>cd");
  EXPECT_EQ(ByteTokenizer::kVocabSize, 257);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{65, 257}), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

// --- mock -------------------------------------------------------------------------------------

TEST(MockDataset, DeterministicAndInRange) {
  const int64_t B = 3, T = 64, V = 300;
  const MockDataset a(V, 7), b(V, 7), c(V, 8);
  std::vector<int32_t> x(B * (T + 1)), y(B * (T + 1)), z(B * (T + 1));
  a.next_batch(5, 1, B, T, x.data());
  b.next_batch(5, 1, B, T, y.data());
  EXPECT_EQ(x, y);
  for (int32_t t : x) EXPECT_TRUE(t >= 0 && t < V);
  std::set<int32_t> distinct(x.begin(), x.end());
  EXPECT_GT(distinct.size(), 100u);
  c.next_batch(5, 1, B, T, z.data());
  EXPECT_NE(x, z);  // another seed
  a.next_batch(6, 1, B, T, z.data());
  EXPECT_NE(x, z);  // another step
  a.next_batch(5, 0, B, T, z.data());
  EXPECT_NE(x, z);  // another micro-batch
  // Sequences are independent of how a batch is split.
  std::vector<int32_t> tail(T + 1);
  a.fill_sequences(5, 1, 2, 1, T, tail.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), x.begin() + 2 * (T + 1)));
  // Eval data do not depend on the seed.
  a.eval_batch(0, B, T, y.data());
  c.eval_batch(0, B, T, z.data());
  EXPECT_EQ(y, z);
  EXPECT_THROW(MockDataset(0, 1), Error);
  EXPECT_THROW(a.next_batch(0, 0, 0, T, x.data()), Error);
}

// --- text -------------------------------------------------------------------------------------

TEST(TextDataset, DocumentsAreSplitAtPercentLines) {
  TempDir dir;
  const std::string f1 = dir.write("f1", "first doc\nline two\n%\nsecond doc\n%\n%\nthird\n");
  const std::string f2 = dir.write("f2", "a file with no separators\n100% sure\n");
  const TextDataset ds({f1, f2}, 1, 0.0);
  EXPECT_EQ(ds.num_documents(), 4);
  const ByteTokenizer tok;
  std::vector<int32_t> all(ds.tokens().begin(), ds.tokens().end());
  EXPECT_EQ(tok.decode(all, "|"),
            "first doc\nline two\n|second doc\n|third\n|a file with no separators\n100% sure\n|");
  EXPECT_EQ(ds.vocab_size(), 257);
  EXPECT_FALSE(ds.has_eval());
}

TEST(TextDataset, WindowsAreSubstringsOfTheFileAndDeterministic) {
  TempDir dir;
  const std::string text = sample_text(400);
  const std::string path = dir.write("corpus.txt", text);
  const int64_t B = 4, T = 48;
  const TextDataset ds({path}, 42);
  const ByteTokenizer tok;
  // The stream is the file plus one EOD at the end.
  ASSERT_EQ(ds.num_tokens(), static_cast<int64_t>(text.size()) + 1);
  EXPECT_EQ(ds.num_eval_tokens(), static_cast<int64_t>((text.size() + 1) / 20));

  std::vector<int32_t> x(B * (T + 1)), y(B * (T + 1));
  for (int64_t step = 0; step < 20; ++step) {
    ds.next_batch(step, 0, B, T, x.data());
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int32_t> row(x.begin() + b * (T + 1), x.begin() + (b + 1) * (T + 1));
      for (int32_t t : row) ASSERT_NE(t, ByteTokenizer::kEod);  // the only EOD is held out
      const std::string s = tok.decode(row);
      ASSERT_EQ(s.size(), static_cast<size_t>(T + 1));
      const size_t at = text.find(s);
      ASSERT_NE(at, std::string::npos) << s;
      EXPECT_LE(at + T + 1, static_cast<size_t>(ds.num_train_tokens()));
    }
  }
  ds.next_batch(3, 1, B, T, x.data());
  TextDataset(std::vector<std::string>{path}, 42).next_batch(3, 1, B, T, y.data());
  EXPECT_EQ(x, y);  // same (seed, step, micro): same batch, from a fresh object
  ds.next_batch(4, 1, B, T, y.data());
  EXPECT_NE(x, y);  // another step
  TextDataset({path}, 43).next_batch(3, 1, B, T, y.data());
  EXPECT_NE(x, y);  // another seed
}

TEST(TextDataset, EvalSplitIsDisjointFromTrainingWindows) {
  TempDir dir;
  const std::string path = dir.write("corpus.txt", sample_text(300));
  const int64_t B = 2, T = 32;
  const TextDataset ds({path}, 9);
  ASSERT_TRUE(ds.has_eval());
  const int64_t split = ds.num_train_tokens();
  EXPECT_GT(split, 0);
  EXPECT_GT(ds.num_eval_tokens(), T + 1);

  // Training windows, checked by position: find each one's offset in the stream.
  auto offsets_of = [&](const std::vector<int32_t>& batch) {
    std::vector<int64_t> offs;
    const auto& s = ds.tokens();
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* row = batch.data() + b * (T + 1);
      for (int64_t o = 0; o + T + 1 <= ds.num_tokens(); ++o) {
        if (std::equal(row, row + T + 1, s.begin() + o)) {
          offs.push_back(o);
          break;
        }
      }
    }
    return offs;
  };
  std::vector<int32_t> x(B * (T + 1));
  for (int64_t step = 0; step < 50; ++step) {
    ds.next_batch(step, 0, B, T, x.data());
    for (int64_t o : offsets_of(x)) EXPECT_LE(o + T + 1, split);
  }
  const int64_t nb = ds.num_eval_batches(B, T);
  EXPECT_EQ(nb, (ds.num_eval_tokens() / (T + 1) + B - 1) / B);
  std::set<int64_t> eval_offsets;
  for (int64_t i = 0; i < nb; ++i) {
    ds.eval_batch(i, B, T, x.data());
    for (int64_t o : offsets_of(x)) {
      EXPECT_GE(o, split);
      eval_offsets.insert(o);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(eval_offsets.size()), ds.num_eval_tokens() / (T + 1));
  // Eval batches do not depend on the seed.
  std::vector<int32_t> e1(B * (T + 1)), e2(B * (T + 1));
  ds.eval_batch(1, B, T, e1.data());
  TextDataset({path}, 10).eval_batch(1, B, T, e2.data());
  EXPECT_EQ(e1, e2);
}

TEST(TextDataset, DirectoryExpandsToCorpusFiles) {
  TempDir dir;
  dir.write("b", "bee\n");
  dir.write("a", "ay\n");
  dir.write("a.dat", "binary index");
  dir.write(".hidden", "no");
  fs::create_symlink(dir.str() + "/a", dir.str() + "/a.u8");
  const auto files = list_corpus_files(dir.str());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "a");
  EXPECT_EQ(fs::path(files[1]).filename(), "b");
  const TextDataset ds({dir.str()}, 0, 0.0);
  EXPECT_EQ(ds.files().size(), 2u);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.num_tokens(), 3 + 1 + 4 + 1);
}

TEST(TextDataset, Errors) {
  TempDir dir;
  const std::string missing = dir.str() + "/missing.txt";
  std::string e = error_of([&] { TextDataset({missing}, 1); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.txt"), std::string::npos) << e;

  const std::string empty = dir.write("empty.txt", "");
  e = error_of([&] { TextDataset({empty}, 1); });
  EXPECT_NE(e.find("no text"), std::string::npos) << e;
  const std::string only_sep = dir.write("sep.txt", "%\n%\n");
  EXPECT_THROW(TextDataset({only_sep}, 1), Error);

  const std::string short_file = dir.write("short.txt", "just a few bytes");  // 16 + EOD
  const TextDataset ds({short_file}, 1, 0.0);
  std::vector<int32_t> x(2 * 65);
  e = error_of([&] { ds.next_batch(0, 0, 2, 64, x.data()); });
  EXPECT_NE(e.find("too short"), std::string::npos) << e;
  EXPECT_NO_THROW(ds.next_batch(0, 0, 2, 16, x.data()));  // exactly T+1 = 17 tokens
  e = error_of([&] { ds.eval_batch(0, 2, 16, x.data()); });
  EXPECT_NE(e.find("no held-out split"), std::string::npos) << e;

  EXPECT_THROW(TextDataset({}, 1), Error);
  EXPECT_THROW(TextDataset({short_file}, 1, 1.5), Error);
}

TEST(TextDataset, DefaultCorpus) {
  // scripts/install_deps.sh installs the corpus; without it this fails with that advice.
  const std::string dir = default_corpus_path();
  const auto files = list_corpus_files(dir);
  EXPECT_GE(files.size(), 10u);
  const TextDataset ds({dir}, 1);
  EXPECT_GT(ds.num_tokens(), 1000000);
  EXPECT_GT(ds.num_documents(), 10000);
  std::vector<int32_t> x(4 * 257);
  ds.next_batch(0, 0, 4, 256, x.data());
  for (int32_t t : x) EXPECT_TRUE(t >= 0 && t <= 256);
}
