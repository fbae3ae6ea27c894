#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "core/warning.h"
#include "data/byte_tokenizer.h"
#include "data/documents.h"
#include "data/prepare.h"
#include "data/text_bytes.h"
#include "data/text_stream.h"

namespace moet {
namespace {

namespace fs = std::filesystem;

// Stream tags keep the purposes of random numbers apart.
constexpr uint64_t kTrainTag = 0x747261696E;  // "train"
constexpr uint64_t kEvalTag = 0x6576616C;     // "eval"

void check_shape(int64_t step, int64_t micro, int64_t first_seq, int64_t count, int64_t T) {
  MOET_CHECK(step >= 0 && micro >= 0 && first_seq >= 0, "dataset: step (", step, "), micro (",
             micro, ") and first sequence (", first_seq, ") must be non-negative");
  MOET_CHECK(count > 0 && T > 0, "dataset: batch size (", count, ") and sequence length (", T,
             ") must be positive");
}

// A NUL byte or invalid UTF-8 in the first 8 KiB (a UTF-8 sequence cut at 8 KiB is no reason).
bool looks_binary(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string head(8192, '\0');
  f.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(f.gcount()));
  if (head.find('\0') != std::string::npos) return true;
  if (head.size() == 8192) head.resize(complete_utf8_prefix(head));
  return utf8_valid_prefix(head) < head.size();
}

}  // namespace

void TokenDataset::eval_batch(int64_t, int64_t, int64_t, int32_t*) const {
  MOET_FAIL("dataset '", describe(), "' has no held-out split for evaluation");
}

int64_t TokenDataset::num_eval_batches(int64_t, int64_t) const { return 0; }

// ---------------------------------------------------------------------------------------------

MockDataset::MockDataset(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {
  MOET_CHECK(vocab > 0, "mock dataset: vocabulary size must be positive, got ", vocab);
}

std::string MockDataset::describe() const {
  return str("mock data: uniform random tokens in [0, ", vocab_, "), seed ", seed_);
}

void MockDataset::fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count,
                                 int64_t T, int32_t* out) const {
  check_shape(step, micro, first_seq, count, T);
  for (int64_t s = 0; s < count; ++s) {
    const CounterRng rng(
        seed_, stream_id({kTrainTag, static_cast<uint64_t>(step), static_cast<uint64_t>(micro),
                          static_cast<uint64_t>(first_seq + s)}));
    int32_t* row = out + s * (T + 1);
    for (int64_t t = 0; t <= T; ++t)
      row[t] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(t), vocab_));
  }
}

void MockDataset::eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out) const {
  check_shape(0, 0, index, B, T);
  for (int64_t b = 0; b < B; ++b) {
    // Not keyed by the seed: the held-out data are the same in every run.
    const CounterRng rng(
        0, stream_id({kEvalTag, static_cast<uint64_t>(index), static_cast<uint64_t>(b)}));
    int32_t* row = out + b * (T + 1);
    for (int64_t t = 0; t <= T; ++t)
      row[t] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(t), vocab_));
  }
}

// ---------------------------------------------------------------------------------------------

TextDataset::TextDataset(const std::vector<std::string>& paths, uint64_t seed, double eval_fraction,
                         const Tokenizer* tokenizer, const TextFormat& format)
    : json_key_(format.json_key), seed_(seed) {
  const DocBoundary boundary = format.boundary;
  MOET_CHECK(!paths.empty(), "text dataset: no input files given");
  MOET_CHECK(eval_fraction >= 0.0 && eval_fraction <= 1.0,
             "text dataset: held-out fraction must be in [0, 1], got ", eval_fraction);
  files_ = expand_inputs(paths);

  const ByteTokenizer bytes;
  const Tokenizer& tok = tokenizer ? *tokenizer : bytes;
  vocab_ = tok.vocab_size();
  tokenizer_ = tokenizer ? tok.describe() : "byte";
  SingleDocumentFiles single(boundary);
  for (const std::string& path : files_) {
    const int64_t docs_before = num_docs_;
    for_each_file_document(
        path, format.json_key, boundary,
        [&](std::string_view doc) {
          if (doc.empty()) return;
          tok.encode_append(doc, tokens_);
          tokens_.push_back(tok.eod_id());
          ++num_docs_;
        },
        &skips_);
    if (!is_jsonl_path(path)) single.add(path, num_docs_ - docs_before);
  }
  MOET_CHECK(skips_.total() == 0 || !tokens_.empty(),
             no_documents_message(files_.size(), skips_, format.json_key));
  MOET_CHECK(!tokens_.empty(), "no text in ",
             files_.size() == 1 ? "'" + files_[0] + "'" : str(files_.size(), " files"),
             " (empty, or only separator lines); give a non-empty text file");
  if (skips_.missing_key > 0) warn("skipped " + skips_.missing_key_note(format.json_key));
  single.warn();
  const auto n = static_cast<int64_t>(tokens_.size());
  eval_begin_ = n - static_cast<int64_t>(static_cast<double>(n) * eval_fraction);
}

int64_t TextDataset::vocab_size() const { return vocab_; }

std::string TextDataset::describe() const {
  return str("text data: ", files_.size() == 1 ? files_[0] : str(files_.size(), " files"), ", ",
             num_tokens(), " tokens in ", num_docs_, " documents (", num_train_tokens(),
             " train, ", num_eval_tokens(), " held out), tokenizer ", tokenizer_, ", seed ", seed_,
             skips_.malformed ? str(", ", skips_.malformed, " malformed JSONL lines skipped") : "",
             skips_.missing_key ? str(", ", skips_.missing_key, " JSONL lines without \"",
                                      json_key_, "\" skipped")
                                : "");
}

void TextDataset::fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count,
                                 int64_t T, int32_t* out) const {
  check_shape(step, micro, first_seq, count, T);
  MOET_CHECK(eval_begin_ >= T + 1, "text data too short: ", eval_begin_,
             " training tokens, but a sequence of length ", T, " needs ", T + 1,
             "; use more text or a shorter sequence");
  const auto windows = static_cast<uint64_t>(eval_begin_ - T);  // start offsets 0..train-T-1
  for (int64_t s = 0; s < count; ++s) {
    const CounterRng rng(
        seed_, stream_id({kTrainTag, static_cast<uint64_t>(step), static_cast<uint64_t>(micro),
                          static_cast<uint64_t>(first_seq + s)}));
    const int32_t* src = tokens_.data() + rng.below(0, windows);
    std::copy(src, src + T + 1, out + s * (T + 1));
  }
}

int64_t TextDataset::num_eval_batches(int64_t B, int64_t T) const {
  MOET_CHECK(B > 0 && T > 0, "eval batch size (", B, ") and sequence length (", T,
             ") must be positive");
  const int64_t windows = num_eval_tokens() / (T + 1);
  return (windows + B - 1) / B;
}

void TextDataset::eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out) const {
  check_shape(0, 0, index, B, T);
  if (!has_eval()) TokenDataset::eval_batch(index, B, T, out);  // throws: no held-out split
  const int64_t windows = num_eval_tokens() / (T + 1);
  MOET_CHECK(windows >= 1, "held-out text too short: ", num_eval_tokens(),
             " tokens, but a sequence of length ", T, " needs ", T + 1,
             "; use more text, a larger held-out fraction or a shorter sequence");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = (index * B + b) % windows;
    const int32_t* src = tokens_.data() + eval_begin_ + w * (T + 1);
    std::copy(src, src + T + 1, out + b * (T + 1));
  }
}

// ---------------------------------------------------------------------------------------------

std::vector<std::string> list_corpus_files(const std::string& dir) {
  std::error_code ec;
  MOET_CHECK(fs::is_directory(dir, ec), "corpus directory '", dir, "' does not exist");
  std::vector<std::string> out, binary;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    auto ends_with = [&](std::string_view suf) {
      return name.size() >= suf.size() &&
             name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
    };
    if (name.empty() || name[0] == '.' || ends_with(".dat") || ends_with(".u8")) continue;
    std::error_code ec2;
    if (!e.is_regular_file(ec2)) continue;
    (!ends_with(".gz") && looks_binary(e.path().string()) ? binary : out)
        .push_back(e.path().string());
  }
  MOET_CHECK(!ec, "cannot list corpus directory '", dir, "': ", ec.message());
  std::sort(out.begin(), out.end());
  if (!binary.empty()) {
    std::sort(binary.begin(), binary.end());
    warn(str("skipping ", binary.size() == 1 ? "'" + binary[0] + "'" : str(binary.size(), " files"),
             " in '", dir, "': not text (a NUL byte or invalid UTF-8 in the first 8 KiB)",
             binary.size() > 1 ? str(", e.g. '", binary[0], "'") : std::string()));
  }
  return out;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      auto listed = list_corpus_files(in);
      MOET_CHECK(!listed.empty(), "input directory '", in, "' holds no files");
      files.insert(files.end(), listed.begin(), listed.end());
    } else if (fs::exists(in, ec)) {
      files.push_back(in);
    } else {
      MOET_CHECK(in.find_first_of("*?[") != std::string::npos, "input '", in, "' does not exist");
      glob_t g{};
      const int rc = ::glob(in.c_str(), 0, nullptr, &g);
      std::vector<std::string> matched;
      for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i], ec)) matched.push_back(g.gl_pathv[i]);
      ::globfree(&g);
      MOET_CHECK(!matched.empty(), "input pattern '", in, "' matches no file");
      std::sort(matched.begin(), matched.end());
      files.insert(files.end(), matched.begin(), matched.end());
    }
  }
  MOET_CHECK(!files.empty(), "no input files given");
  return files;
}

std::string default_corpus_path() {
  const std::string dir = "/usr/share/games/fortunes";
  std::error_code ec;
  MOET_CHECK(fs::is_directory(dir, ec) && !list_corpus_files(dir).empty(),
             "default English corpus not found in ", dir,
             " (Debian package 'fortunes'); run scripts/install_deps.sh or give a text file");
  return dir;
}

}  // namespace moet
