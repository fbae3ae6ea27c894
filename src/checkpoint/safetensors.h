// safetensors files: a reader (memory-mapped, header validated, dtype-converting copies into
// caller buffers or moet::Tensor views) and an atomic writer (path.tmp, then rename).
// Format: 8-byte little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets} plus an optional "__metadata__" string map, then the data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace moet {

// Element types a safetensors file can hold (the format's names, as in the header).
enum class StDType : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

const char* st_dtype_name(StDType t);
size_t st_dtype_size(StDType t);
// Throws moet::Error naming `context` when `name` is not a known dtype.
StDType st_dtype_from_name(const std::string& name, const std::string& context);
StDType st_dtype_of(DType t);

using Metadata = std::map<std::string, std::string>;

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;

  int64_t numel() const;
  std::string shape_str() const;
};

class SafetensorsReader {
 public:
  // Maps the file and validates the header; throws moet::Error for a missing, truncated or
  // corrupt file.
  explicit SafetensorsReader(const std::string& path);
  SafetensorsReader(SafetensorsReader&& o) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& o) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names in ascending order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  size_t size() const { return tensors_.size(); }
  // Throws moet::Error when `name` is not in the file.
  const StTensorInfo& info(const std::string& name) const;
  const Metadata& metadata() const { return metadata_; }
  // The stored bytes of a tensor (little-endian, as in the file); valid while the reader lives.
  const void* raw(const std::string& name) const;

  // Copies `name` into dst[0..count), converting: to float from F32, F64, BF16, F16; to double
  // from the same; to int32 from I32, I64 (range-checked), I16, U16, I8, U8, BOOL.
  // `count` must equal the tensor's element count.
  void read_f32(const std::string& name, float* dst, int64_t count) const;
  void read_f64(const std::string& name, double* dst, int64_t count) const;
  void read_i32(const std::string& name, int32_t* dst, int64_t count) const;
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<int32_t> read_i32(const std::string& name) const;

  // Copies `name` into `dst`, whose shape must equal the stored shape (the error says expected
  // and found), converting to dst.dtype: F32/F64 from any float type, BF16 from BF16 or F32
  // (round to nearest even), I32 from integer types.
  void read_into(const std::string& name, const Tensor& dst) const;

 private:
  const StTensorInfo& checked(const std::string& name, int64_t count) const;

  std::string path_;
  MappedFile file_;                      // the whole file
  const unsigned char* data_ = nullptr;  // start of the data section
  std::map<std::string, StTensorInfo> tensors_;
  Metadata metadata_;
};

// A tensor to write: the caller's memory, `numel(shape) * st_dtype_size(dtype)` bytes,
// little-endian, row-major.
struct StTensorRef {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes `path` atomically: validates every entry (unique non-empty names, non-negative
// dims, data present), writes `path + ".tmp"`, syncs it and renames it over `path`. On any
// failure the temporary file is removed and an existing `path` is left untouched.
// The data section starts 8-byte aligned (the header is padded with spaces) and holds the
// tensors without gaps, ordered by element size (largest first, then as given) so each tensor
// is aligned to its element size — the layout Hugging Face's safetensors writes and accepts.
void write_safetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                       const Metadata& metadata = {});

// Collects tensors (by reference: the memory must stay valid until write) and writes them.
class SafetensorsWriter {
 public:
  void add(const std::string& name, StDType dtype, std::vector<int64_t> shape, const void* data);
  // Stores `t` with its own dtype and shape.
  void add(const std::string& name, const Tensor& t);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const { write_safetensors(path, tensors_, metadata_); }
  size_t size() const { return tensors_.size(); }

 private:
  std::vector<StTensorRef> tensors_;
  Metadata metadata_;
};

}  // namespace moet
