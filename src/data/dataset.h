// Token datasets for training: every batch is a pure function of (seed, step, micro-batch,
// sequence index), drawn with the counter-based RNG, so a run is reproducible and resumable
// without saving data-loader state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/documents.h"
#include "data/prepare.h"

namespace moet {

class Tokenizer;

// How a run numbers its sequences (sample-indexed datasets, e.g. Megatron's): sequence `seq` of
// micro-batch `micro` of step `step` is sample (step * micro_batches + micro) * seqs_per_micro +
// seq, counted over all data-parallel ranks. The data cursor of a checkpoint is the step, so a
// resumed run with the same layout reads exactly the samples it would have read.
struct SampleLayout {
  int64_t micro_batches = 1;   // micro-batches per step (gradient accumulation)
  int64_t seqs_per_micro = 1;  // sequences of one micro-batch over all data-parallel ranks
  int64_t steps = 0;           // steps the run trains (the samples it needs)
  int64_t seq_len = 0;         // T: samples hold T + 1 tokens
  int64_t sample(int64_t step, int64_t micro, int64_t seq) const {
    return (step * micro_batches + micro) * seqs_per_micro + seq;
  }
  int64_t total_samples() const { return steps * micro_batches * seqs_per_micro; }
};

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;

  virtual int64_t vocab_size() const = 0;
  // One line for logs: what the data are.
  virtual std::string describe() const = 0;

  // Called once before training with the run's layout; sample-indexed datasets build (or load)
  // their index here. The default does nothing.
  virtual void plan(const SampleLayout& layout) { (void)layout; }

  // Fills `count` sequences of T+1 tokens into out[count][T+1]; sequence s is the one with
  // global index first_seq + s of micro-batch `micro` of step `step` (so data-parallel ranks
  // can each fill their own slice of one global batch).
  virtual void fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count,
                              int64_t T, int32_t* out) const = 0;
  // B sequences 0..B-1 of (step, micro).
  void next_batch(int64_t step, int64_t micro, int64_t B, int64_t T, int32_t* out_B_T1) const {
    fill_sequences(step, micro, 0, B, T, out_B_T1);
  }

  // Held-out data: batch `index` (0, 1, ...) of B sequences of T+1 tokens, the same for every
  // seed. The default throws: the dataset has no held-out split.
  virtual bool has_eval() const { return false; }
  virtual void eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out_B_T1) const;
  // How many eval batches cover the held-out data once (later indices wrap around).
  virtual int64_t num_eval_batches(int64_t B, int64_t T) const;
};

// Uniform random tokens in [0, vocab), like Megatron's --mock-data.
class MockDataset : public TokenDataset {
 public:
  MockDataset(int64_t vocab, uint64_t seed);
  int64_t vocab_size() const override { return vocab_; }
  std::string describe() const override;
  void fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count, int64_t T,
                      int32_t* out) const override;
  bool has_eval() const override { return true; }
  void eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out_B_T1) const override;
  int64_t num_eval_batches(int64_t, int64_t) const override { return 1; }

 private:
  int64_t vocab_;
  uint64_t seed_;
};

// Tokenized text (the byte tokenizer unless one is given). Each file's documents are read as
// `moet data prepare` reads them (for_each_file_document): a .jsonl / .jsonl.gz file's
// format.json_key fields (lines without one skipped and counted in describe()); other files (.gz
// decompressed) split by format.boundary (default: at lines that are exactly "%", the fortune
// format; a file
// without separators is one document, with a warning that the rule may be the wrong one);
// every non-empty document is followed by the tokenizer's end-of-document token, and all are
// concatenated in file order. The last
// `eval_fraction` of that stream is held out: training windows (T+1 consecutive tokens at
// random offsets) lie entirely in the first part, eval windows (consecutive, non-overlapping)
// entirely in the last part.
class TextDataset : public TokenDataset {
 public:
  // `paths`: text or JSONL files, directories (list_corpus_files(dir)) or globs.
  // `tokenizer`: null for the byte tokenizer; used only while constructing.
  TextDataset(const std::vector<std::string>& paths, uint64_t seed, double eval_fraction = 0.05,
              const Tokenizer* tokenizer = nullptr, const TextFormat& format = {});

  int64_t vocab_size() const override;
  std::string describe() const override;
  void fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count, int64_t T,
                      int32_t* out) const override;
  bool has_eval() const override { return eval_begin_ < num_tokens(); }
  void eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out_B_T1) const override;
  int64_t num_eval_batches(int64_t B, int64_t T) const override;

  const std::vector<std::string>& files() const { return files_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_documents() const { return num_docs_; }
  int64_t num_train_tokens() const { return eval_begin_; }
  int64_t num_eval_tokens() const { return num_tokens() - eval_begin_; }
  // The whole token stream (training part first, then the held-out part).
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> files_;
  std::vector<int32_t> tokens_;
  int64_t vocab_ = 0;
  std::string tokenizer_;
  int64_t num_docs_ = 0;
  JsonlSkips skips_;  // JSONL lines skipped
  std::string json_key_;
  int64_t eval_begin_ = 0;
  uint64_t seed_;
};

// The plain-text files of a corpus directory, sorted by name: regular files whose names do not
// start with '.' and do not end in ".dat" or ".u8" (the fortune index files and UTF-8 links).
// Binary files (a NUL byte or invalid UTF-8 in the first 8 KiB; .gz files are not looked into)
// are skipped with a one-line warning (moet::warn).
std::vector<std::string> list_corpus_files(const std::string& dir);

// The files `inputs` name: a file as it is; a directory, list_corpus_files(dir); a pattern with
// * ? or [ that names no file, its glob matches (sorted). Throws moet::Error for a name that
// matches nothing or a directory without files.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// The default English corpus: the directory of Debian's `fortunes` package
// (/usr/share/games/fortunes). Throws moet::Error saying to run scripts/install_deps.sh when
// it is missing.
std::string default_corpus_path();

}  // namespace moet
