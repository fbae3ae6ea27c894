#include "data/indexed_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/mapped_file.h"

namespace moet {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, counts

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

int64_t load_token(const unsigned char* p, uint8_t code) {
  switch (static_cast<IndexedDType>(code)) {
    case IndexedDType::kU8:
      return load<uint8_t>(p);
    case IndexedDType::kI8:
      return load<int8_t>(p);
    case IndexedDType::kI16:
      return load<int16_t>(p);
    case IndexedDType::kI32:
      return load<int32_t>(p);
    case IndexedDType::kI64:
      return load<int64_t>(p);
    case IndexedDType::kU16:
      return load<uint16_t>(p);
    default:
      MOET_ASSERT(false);
  }
}

bool integer_code(uint8_t code) {
  return indexed_dtype_bytes(code) > 0 && code != uint8_t(IndexedDType::kF32) &&
         code != uint8_t(IndexedDType::kF64);
}

void store_token(unsigned char* p, IndexedDType dtype, int32_t v) {
  switch (dtype) {
    case IndexedDType::kU8:
      *p = static_cast<uint8_t>(v);
      break;
    case IndexedDType::kI8:
      *p = static_cast<unsigned char>(static_cast<int8_t>(v));
      break;
    case IndexedDType::kI16: {
      const auto x = static_cast<int16_t>(v);
      std::memcpy(p, &x, 2);
    } break;
    case IndexedDType::kU16: {
      const auto x = static_cast<uint16_t>(v);
      std::memcpy(p, &x, 2);
    } break;
    case IndexedDType::kI32:
      std::memcpy(p, &v, 4);
      break;
    case IndexedDType::kI64: {
      const auto x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
    } break;
    default:
      MOET_ASSERT(false);
  }
}

bool fits(IndexedDType dtype, int32_t v) {
  switch (dtype) {
    case IndexedDType::kU8:
      return v >= 0 && v <= 255;
    case IndexedDType::kI8:
      return v >= -128 && v <= 127;
    case IndexedDType::kI16:
      return v >= -32768 && v <= 32767;
    case IndexedDType::kU16:
      return v >= 0 && v <= 65535;
    default:
      return true;
  }
}

}  // namespace

int64_t indexed_dtype_bytes(uint8_t code) {
  switch (code) {
    case 1:
    case 2:
      return 1;
    case 3:
    case 8:
      return 2;
    case 4:
    case 7:
      return 4;
    case 5:
    case 6:
      return 8;
    default:
      return 0;
  }
}

std::string indexed_dtype_name(uint8_t code) {
  static const char* const names[] = {"",      "uint8",   "int8",    "int16", "int32",
                                      "int64", "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? names[code] : str("code ", int(code));
}

IndexedDType optimal_indexed_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDType::kU16 : IndexedDType::kI32;
}

bool is_indexed_prefix(const std::string& prefix) {
  std::error_code ec;
  return !prefix.empty() && std::filesystem::is_regular_file(prefix + ".idx", ec);
}

// ---------------------------------------------------------------------------------------------

IndexedDataset::IndexedDataset(const std::string& prefix)
    : IndexedDataset(prefix + ".idx", prefix + ".bin", prefix) {}

IndexedDataset::IndexedDataset(const std::string& idx_path, const std::string& bin_path,
                               const std::string& name)
    : name_(name), idx_path_(idx_path), bin_path_(bin_path) {
  open_and_check();
}

void IndexedDataset::open_and_check() {
  const std::string& ip = idx_path_;
  idx_ = MappedFile(ip, "Megatron index");
  MOET_CHECK(idx_.size() >= kHeaderBytes && std::memcmp(idx_.data(), kMagic, 9) == 0, ip,
             ": not a Megatron index (the file does not start with MMIDIDX\\0\\0)");
  const auto version = load<uint64_t>(idx_.data() + 9);
  MOET_CHECK(version == 1, ip, ": index version ", version, " (only version 1 is known)");
  dtype_ = idx_.data()[17];
  MOET_CHECK(indexed_dtype_bytes(dtype_) > 0, ip, ": unknown dtype code ", int(dtype_),
             " (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  MOET_CHECK(integer_code(dtype_), ip, ": dtype ", indexed_dtype_name(dtype_),
             " holds no token ids (an integer dtype is needed)");
  const auto seqs = load<uint64_t>(idx_.data() + 18), docs = load<uint64_t>(idx_.data() + 26);
  // Bounded by the file size before any product, so nothing overflows.
  const size_t body = idx_.size() - kHeaderBytes;
  MOET_CHECK(seqs <= body / 12 && docs <= body / 8 && 12 * seqs + 8 * docs <= body, ip, ": ", seqs,
             " sequences and ", docs, " document boundaries need ", "more than the file's ",
             idx_.size(), " bytes");
  const size_t need = kHeaderBytes + 12 * seqs + 8 * docs;
  // Megatron's multimodal indexes end with one mode byte per sequence.
  MOET_CHECK(idx_.size() == need || idx_.size() == need + seqs, ip, ": ", seqs, " sequences and ",
             docs, " document boundaries make ", need, " bytes, but the file has ", idx_.size());
  MOET_CHECK(docs >= 1, ip, ": the document index is empty (it starts with 0)");
  num_sequences_ = static_cast<int64_t>(seqs);
  num_doc_entries_ = static_cast<int64_t>(docs);
  lengths_at_ = kHeaderBytes;
  pointers_at_ = lengths_at_ + 4 * seqs;
  docs_at_ = pointers_at_ + 8 * seqs;

  bin_ = MappedFile(bin_path_, "Megatron token file");
  const auto width = static_cast<uint64_t>(dtype_bytes());
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t len = sequence_length(i);
    const int64_t ptr = sequence_pointer(i);
    MOET_CHECK(len >= 0 && ptr >= 0, ip, ": sequence ", i, " has a negative length (", len,
               ") or offset (", ptr, ")");
    MOET_CHECK(uint64_t(ptr) <= bin_.size() && uint64_t(len) * width <= bin_.size() - uint64_t(ptr),
               ip, ": sequence ", i, " (", len, " tokens at byte ", ptr, ") lies past the end of ",
               bin_path_, " (", bin_.size(), " bytes)");
    num_tokens_ += len;
  }
  int64_t prev = 0;
  for (int64_t i = 0; i < num_doc_entries_; ++i) {
    const int64_t b = document_boundary(i);
    MOET_CHECK(i > 0 || b == 0, ip, ": the document index starts with ", b, ", not 0");
    MOET_CHECK(b >= prev && b <= num_sequences_, ip, ": document boundary ", i, " (", b,
               ") is out of order or past the ", num_sequences_, " sequences");
    prev = b;
  }
  MOET_CHECK(prev == num_sequences_, ip, ": the document index ends at sequence ", prev,
             ", not at the sequence count ", num_sequences_);
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  MOET_ASSERT(i >= 0 && i < num_sequences_);
  return load<int32_t>(idx_.data() + lengths_at_ + 4 * size_t(i));
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  MOET_ASSERT(i >= 0 && i < num_sequences_);
  return load<int64_t>(idx_.data() + pointers_at_ + 8 * size_t(i));
}

int64_t IndexedDataset::document_boundary(int64_t i) const {
  MOET_ASSERT(i >= 0 && i < num_doc_entries_);
  return load<int64_t>(idx_.data() + docs_at_ + 8 * size_t(i));
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t n, int32_t* out) const {
  MOET_ASSERT(offset >= 0 && n >= 0 && offset + n <= sequence_length(seq));
  const int64_t w = dtype_bytes();
  const unsigned char* p = bin_.data() + sequence_pointer(seq) + offset * w;
  if (dtype_ == uint8_t(IndexedDType::kU16)) {
    for (int64_t i = 0; i < n; ++i) out[i] = load<uint16_t>(p + 2 * i);
  } else if (dtype_ == uint8_t(IndexedDType::kI32)) {
    if (n > 0) std::memcpy(out, p, size_t(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = load_token(p + i * w, dtype_);
      MOET_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(), bin_path_, ": token ", v,
                 " of sequence ", seq, " is not a token id");
      out[i] = static_cast<int32_t>(v);
    }
  }
}

std::vector<int32_t> IndexedDataset::sequence(int64_t seq) const {
  std::vector<int32_t> out(size_t(sequence_length(seq)));
  read(seq, 0, int64_t(out.size()), out.data());
  return out;
}

std::pair<int64_t, int64_t> IndexedDataset::token_range() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  const int64_t w = dtype_bytes();
#pragma omp parallel for schedule(dynamic, 256) reduction(min : lo) reduction(max : hi)
  for (int64_t s = 0; s < num_sequences_; ++s) {
    const unsigned char* p = bin_.data() + sequence_pointer(s);
    const int64_t n = sequence_length(s);
    if (dtype_ == uint8_t(IndexedDType::kU16)) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = load<uint16_t>(p + 2 * i);
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = load_token(p + i * w, dtype_);
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
    }
  }
  if (lo > hi) return {0, -1};
  return {lo, hi};
}

uint64_t IndexedDataset::idx_fingerprint() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < idx_.size(); ++i) h = (h ^ idx_.data()[i]) * 0x100000001b3ull;
  return h;
}

// ---------------------------------------------------------------------------------------------

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, IndexedDType dtype,
                                           bool overwrite)
    : prefix_(prefix), dtype_(dtype), overwrite_(overwrite) {
  MOET_CHECK(integer_code(uint8_t(dtype)), "indexed dataset writer: dtype ",
             indexed_dtype_name(uint8_t(dtype)), " holds no token ids");
  std::error_code ec;
  for (const char* ext : {".bin", ".idx"})
    MOET_CHECK(overwrite || !std::filesystem::exists(prefix + ext, ec), "'", prefix, ext,
               "' already exists; refusing to overwrite it (pass --overwrite to replace it)");
  // a missing folder of PREFIX is made (as moet train makes --out)
  const std::filesystem::path folder = std::filesystem::path(prefix).parent_path();
  if (!folder.empty()) {
    MOET_CHECK(!std::filesystem::exists(folder, ec) || std::filesystem::is_directory(folder, ec),
               "'", folder.string(), "' (the folder of ", prefix, ") is not a directory");
    std::filesystem::create_directories(folder, ec);
  }
  const std::string tag = ".tmp-" + std::to_string(::getpid());
  bin_tmp_ = prefix + ".bin" + tag;
  idx_tmp_ = prefix + ".idx" + tag;
  bin_ = std::fopen(bin_tmp_.c_str(), "wb");
  MOET_CHECK(bin_ != nullptr, "cannot create '", bin_tmp_, "': ", std::strerror(errno));
  std::setvbuf(bin_, nullptr, _IOFBF, 1 << 20);
  pointers_.reserve(1024);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finished_) return;
  if (bin_) std::fclose(bin_);
  std::remove(bin_tmp_.c_str());
  std::remove(idx_tmp_.c_str());
}

void IndexedDatasetWriter::add_document(const int32_t* ids, int64_t n) {
  MOET_ASSERT(!finished_ && n >= 0);
  MOET_CHECK(n <= std::numeric_limits<int32_t>::max(), prefix_, ": a document of ", n,
             " tokens is longer than the index can record");
  const int64_t w = indexed_dtype_bytes(uint8_t(dtype_));
  buf_.resize(size_t(n * w));
  auto check = [&](int64_t i) {
    MOET_CHECK(fits(dtype_, ids[i]), prefix_, ": token id ", ids[i], " does not fit dtype ",
               indexed_dtype_name(uint8_t(dtype_)));
  };
  if (dtype_ == IndexedDType::kU16) {  // the common cases without a switch per token
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] > 65535) check(i);
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buf_.data() + 2 * i, &v, 2);
    }
  } else if (dtype_ == IndexedDType::kI32) {
    if (n > 0) std::memcpy(buf_.data(), ids, size_t(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      check(i);
      store_token(buf_.data() + i * w, dtype_, ids[i]);
    }
  }
  if (n > 0)
    MOET_CHECK(std::fwrite(buf_.data(), 1, buf_.size(), bin_) == buf_.size(), "error writing '",
               bin_tmp_, "': ", std::strerror(errno));
  pointers_.push_back(bin_bytes_);
  lengths_.push_back(static_cast<int32_t>(n));
  bin_bytes_ += n * w;
  tokens_ += n;
}

void IndexedDatasetWriter::finish() {
  MOET_ASSERT(!finished_);
  const bool bin_ok = std::fflush(bin_) == 0 && ::fsync(fileno(bin_)) == 0;
  const bool closed = std::fclose(bin_) == 0;
  bin_ = nullptr;
  MOET_CHECK(bin_ok && closed, "error writing '", bin_tmp_, "': ", std::strerror(errno));

  std::FILE* f = std::fopen(idx_tmp_.c_str(), "wb");
  MOET_CHECK(f != nullptr, "cannot create '", idx_tmp_, "': ", std::strerror(errno));
  const uint64_t version = 1, seqs = lengths_.size(), docs = lengths_.size() + 1;
  const auto code = static_cast<uint8_t>(dtype_);
  bool ok = std::fwrite(kMagic, 1, 9, f) == 9 && std::fwrite(&version, 8, 1, f) == 1 &&
            std::fwrite(&code, 1, 1, f) == 1 && std::fwrite(&seqs, 8, 1, f) == 1 &&
            std::fwrite(&docs, 8, 1, f) == 1;
  ok = ok && std::fwrite(lengths_.data(), 4, seqs, f) == seqs;
  ok = ok && std::fwrite(pointers_.data(), 8, seqs, f) == seqs;
  // One sequence per document: boundaries 0, 1, ..., seqs.
  for (uint64_t i = 0; ok && i < docs; ++i) {
    const auto b = static_cast<int64_t>(i);
    ok = std::fwrite(&b, 8, 1, f) == 1;
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  MOET_CHECK(ok, "error writing '", idx_tmp_, "': ", std::strerror(errno));

  // The old .idx goes first: at no moment does a complete-looking prefix pair a new .bin with
  // an old .idx.
  std::error_code ec;
  if (overwrite_) std::filesystem::remove(prefix_ + ".idx", ec);
  std::filesystem::rename(bin_tmp_, prefix_ + ".bin", ec);
  MOET_CHECK(!ec, "cannot rename '", bin_tmp_, "' to '", prefix_, ".bin': ", ec.message());
  std::filesystem::rename(idx_tmp_, prefix_ + ".idx", ec);
  MOET_CHECK(!ec, "cannot rename '", idx_tmp_, "' to '", prefix_, ".idx': ", ec.message());
  finished_ = true;
}

}  // namespace moet
