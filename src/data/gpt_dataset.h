// Training samples from Megatron indexed datasets, packed as Megatron's GPTDataset packs them
// (docs/data.md): the documents of the training split shuffled per epoch, cut into samples of
// T + 1 tokens that overlap by one, the samples shuffled; the index cached beside the data.
// Blending several datasets by weight follows Megatron's greedy rule.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/indexed_dataset.h"

namespace moet {

// "95,5" or "969,30,1": train, validation (and test, unused) shares of the documents.
struct DataSplit {
  double train = 95, valid = 5, test = 0;
};
DataSplit parse_data_split(const std::string& text);
// Megatron's split of n documents: [0, train_end) train, [train_end, valid_end) validation
// (cumulative rounded shares, the rounding excess taken off every boundary but the first).
std::pair<int64_t, int64_t> split_document_ranges(const DataSplit& split, int64_t n);

// The sample index of a run (Megatron's document, sample and shuffle indices). Sample i holds
// tokens [i*T, i*T + T] of the stream of documents in doc_idx order; epoch e's stretch of
// doc_idx is a permutation of the split's documents seeded by (seed, e); the shuffle permutes
// each block of samples_per_epoch samples by (seed, block). So sample i does not depend on how
// many samples the run needs (unlike Megatron, whose shuffles span all epochs).
struct SampleIndex {
  int64_t epochs = 0;
  int64_t samples_per_epoch = 0;    // (tokens per epoch - 1) / T
  int64_t num_samples = 0;          // whole blocks: a multiple of samples_per_epoch
  std::vector<int32_t> doc_idx;     // [epochs * documents] document of the split (0-based)
  std::vector<int64_t> sample_idx;  // [(num_samples + 1) * 2] (doc_idx position, token offset)
  std::vector<int64_t> shuffle;     // [num_samples]
};

// Builds the index for at least `min_samples` samples of T + 1 tokens over documents of
// `doc_lengths` tokens. Throws moet::Error (naming `name`) when the documents hold fewer than
// T + 1 tokens.
SampleIndex build_sample_index(const std::vector<int32_t>& doc_lengths, int64_t T, uint64_t seed,
                               int64_t min_samples, const std::string& name);

// Megatron's blending (helpers.cpp build_blending_indices): sample i goes to the dataset whose
// share so far lags its weight the most; returns the dataset of each of the first n samples
// (weights need not be normalised).
std::vector<int16_t> blend_assignment(const std::vector<double>& weights, int64_t n);

// One Megatron prefix as a TokenDataset: training samples through the sample index (after
// plan()), held-out samples from the validation documents in order, packed the same way.
// Token ids outside the model's vocabulary are an error: at construction when .bin is at most
// vocab_scan_bytes (every token scanned), else when read.
class GptDataset : public TokenDataset {
 public:
  static constexpr int64_t kVocabScanBytes = int64_t(1) << 30;
  GptDataset(const std::string& prefix, int64_t model_vocab, uint64_t seed, const DataSplit& split,
             int64_t vocab_scan_bytes = kVocabScanBytes);

  int64_t vocab_size() const override { return vocab_; }
  std::string describe() const override;
  void plan(const SampleLayout& layout) override;
  void fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count, int64_t T,
                      int32_t* out) const override;
  bool has_eval() const override { return valid_end_ > train_end_; }
  void eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out_B_T1) const override;
  int64_t num_eval_batches(int64_t B, int64_t T) const override;

  // The index for at least n training samples of T + 1 tokens: loaded from the cache when one
  // matches, else built and cached (beside the data, else in the user cache directory, else
  // only in memory).
  void prepare_samples(int64_t n, int64_t T);
  // Training sample k (k < the prepared count) into out[T + 1].
  void read_sample(int64_t k, int64_t T, int32_t* out) const;
  // Held-out samples (the validation documents cut into T + 1 tokens overlapping by one).
  int64_t num_eval_samples(int64_t T) const;
  void read_eval_sample(int64_t j, int64_t T, int32_t* out) const;

  const IndexedDataset& data() const { return *data_; }
  const SampleIndex& index() const { return index_; }
  int64_t train_documents() const { return train_end_; }
  int64_t valid_documents() const { return valid_end_ - train_end_; }
  // Where the sample index lives ("" in memory only) and whether it was read from there.
  const std::string& index_path() const { return index_path_; }
  bool index_reused() const { return index_reused_; }

 private:
  // Copies n tokens of document `doc` from `offset` after checking them against the vocabulary.
  void copy_tokens(int64_t doc, int64_t offset, int64_t n, int32_t* out) const;

  std::unique_ptr<IndexedDataset> data_;
  int64_t vocab_;
  uint64_t seed_;
  int64_t train_end_ = 0, valid_end_ = 0;  // document ranges [0, train_end), [.., valid_end)
  std::vector<int64_t> valid_starts_;      // token offset of each validation document + total
  SampleLayout layout_;
  SampleIndex index_;
  int64_t index_T_ = 0;
  std::string index_path_;
  bool index_reused_ = false;
};

// Several prefixes mixed by weight (normalised): training sample n of the blend is sample k of
// dataset d by blend_assignment; held-out samples blend the datasets with validation documents
// the same way.
class BlendedDataset : public TokenDataset {
 public:
  BlendedDataset(std::vector<std::unique_ptr<GptDataset>> parts, std::vector<double> weights);

  int64_t vocab_size() const override { return parts_[0]->vocab_size(); }
  std::string describe() const override;
  void plan(const SampleLayout& layout) override;
  void fill_sequences(int64_t step, int64_t micro, int64_t first_seq, int64_t count, int64_t T,
                      int32_t* out) const override;
  bool has_eval() const override;
  void eval_batch(int64_t index, int64_t B, int64_t T, int32_t* out_B_T1) const override;
  int64_t num_eval_batches(int64_t B, int64_t T) const override;

  const std::vector<double>& weights() const { return weights_; }
  // Which dataset and which of its samples training sample n is (after plan()).
  std::pair<int, int64_t> locate(int64_t n) const;

 private:
  std::vector<std::unique_ptr<GptDataset>> parts_;
  std::vector<double> weights_;
  SampleLayout layout_;
  std::vector<int16_t> dataset_;  // [samples] dataset of each training sample
  std::vector<int64_t> within_;   // [samples] its sample number in that dataset
};

// "0.7 A 0.3 B" (weighted prefixes) or "A": the prefixes and normalised weights. Throws one
// moet::Error line for an odd number of fields, a weight that is no number, negative or not
// finite, or weights summing to zero.
std::pair<std::vector<std::string>, std::vector<double>> parse_data_blend(const std::string& spec);

}  // namespace moet
