// Megatron's indexed dataset (PREFIX.bin tokens + PREFIX.idx index, docs/data.md): a reader
// that maps both files and checks them once, and a writer that publishes a complete pair or
// nothing (temporary names, renamed at the end).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"

namespace moet {

// Megatron's dtype codes (megatron/core/datasets/indexed_dataset.py DType).
enum class IndexedDType : uint8_t {
  kU8 = 1,
  kI8 = 2,
  kI16 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
  kF32 = 7,
  kU16 = 8
};

// Bytes per token of a valid code; 0 for an unknown code.
int64_t indexed_dtype_bytes(uint8_t code);
// "uint16", "int32", ... ("code N" when unknown).
std::string indexed_dtype_name(uint8_t code);
// Megatron's DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500 ids, else
// int32.
IndexedDType optimal_indexed_dtype(int64_t vocab_size);

// PREFIX.idx exists (what tells a Megatron prefix from a text file in --data).
bool is_indexed_prefix(const std::string& prefix);

// A read-only view of PREFIX.bin/.idx. The constructor checks the index completely (magic,
// version, integer dtype, counts against the file size, every sequence inside .bin, document
// boundaries ascending from 0 to the sequence count) and throws one moet::Error line naming
// the file otherwise. Token values are not checked here (readers check them against the
// model's vocabulary as they read).
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  // The two files by name (`name` is used in messages).
  IndexedDataset(const std::string& idx_path, const std::string& bin_path, const std::string& name);
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& name() const { return name_; }
  const std::string& idx_path() const { return idx_path_; }
  const std::string& bin_path() const { return bin_path_; }
  uint8_t dtype_code() const { return dtype_; }
  int64_t dtype_bytes() const { return indexed_dtype_bytes(dtype_); }
  int64_t num_sequences() const { return num_sequences_; }
  // Documents: the boundaries of the document index less one.
  int64_t num_documents() const { return num_doc_entries_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t bin_bytes() const { return static_cast<int64_t>(bin_.size()); }
  int64_t idx_bytes() const { return static_cast<int64_t>(idx_.size()); }

  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;  // byte offset into .bin
  // Entry i of the document index, 0 <= i <= num_documents(): sequence index where document i
  // starts (entry num_documents() is num_sequences()).
  int64_t document_boundary(int64_t i) const;

  // Tokens [offset, offset + n) of sequence `seq` as int32 (n >= 0, within the sequence).
  void read(int64_t seq, int64_t offset, int64_t n, int32_t* out) const;
  std::vector<int32_t> sequence(int64_t seq) const;
  // The least and the greatest token of every sequence (one pass over .bin; {0, -1} when there
  // are no tokens).
  std::pair<int64_t, int64_t> token_range() const;
  // 64-bit FNV-1a of the whole .idx (identifies the index for caches).
  uint64_t idx_fingerprint() const;

 private:
  void open_and_check();

  std::string name_, idx_path_, bin_path_;
  MappedFile idx_, bin_;
  uint8_t dtype_ = 0;
  int64_t num_sequences_ = 0, num_doc_entries_ = 0, num_tokens_ = 0;
  size_t lengths_at_ = 0, pointers_at_ = 0, docs_at_ = 0;  // byte offsets into .idx
};

// Writes PREFIX.bin/.idx in Megatron's format, one sequence per document (as
// tools/preprocess_data.py does), to PREFIX.bin.tmp-PID / PREFIX.idx.tmp-PID; finish() renames
// them into place (.idx last, so a prefix whose .idx exists is complete). A writer destroyed
// without finish() removes its temporary files: an interrupted write leaves nothing under the
// final names.
class IndexedDatasetWriter {
 public:
  // Refuses (moet::Error) when PREFIX.bin or PREFIX.idx exists and !overwrite, or when the
  // files cannot be created. dtype: kU16 or kI32 (or any integer code).
  IndexedDatasetWriter(const std::string& prefix, IndexedDType dtype, bool overwrite);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document of n tokens; throws when a token does not fit the dtype.
  void add_document(const int32_t* ids, int64_t n);
  void add_document(const std::vector<int32_t>& ids) {
    add_document(ids.data(), static_cast<int64_t>(ids.size()));
  }
  // Writes the index and renames both files into place.
  void finish();

  int64_t documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t tokens() const { return tokens_; }
  int64_t bin_bytes() const { return bin_bytes_; }

 private:
  std::string prefix_, bin_tmp_, idx_tmp_;
  IndexedDType dtype_;
  bool overwrite_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<unsigned char> buf_;
  int64_t tokens_ = 0, bin_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace moet
