// libFuzzer target: the safetensors reader (src/checkpoint/safetensors.h) on arbitrary bytes.
// Each input becomes the contents of an in-memory file (memfd) that SafetensorsReader opens by
// path. A moet::Error is the expected rejection of a bad file. A file the reader accepts must
// then hold up under every accessor: its tensors lie inside the data section, raw() shows the
// input's own bytes, and each read succeeds exactly when the documented conversions allow it,
// giving the stored values. Anything else (a crash, a sanitizer report, another exception, a
// hang, or a broken invariant, which aborts naming it) is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/tensor.h"

using moet::StDType;

namespace {

// Tensors with more elements are not read element by element (time and memory per input).
constexpr int64_t kMaxReadElements = int64_t{1} << 16;

[[noreturn]] void finding(const std::string& what, const std::string& tensor) {
  std::fprintf(stderr, "safetensors fuzz finding: %s (tensor '%s')\n", what.c_str(),
               tensor.c_str());
  std::abort();
}

// Runs `f`, which must succeed when `allowed` and throw moet::Error otherwise.
template <typename F>
void expect(bool allowed, const char* what, const std::string& tensor, F&& f) {
  bool ok = true;
  try {
    f();
  } catch (const moet::Error&) {
    ok = false;
  }
  if (ok != allowed)
    finding(std::string(what) + (allowed ? " was rejected" : " was accepted"), tensor);
}

// The file every input is written to: a memfd, reopened by SafetensorsReader through /proc.
struct InputFile {
  int fd = -1;
  std::string path;

  InputFile() {
    fd = ::memfd_create("moet_fuzz_safetensors", MFD_CLOEXEC);
    if (fd < 0) finding("memfd_create failed", "");
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  void write(const uint8_t* data, size_t size) const {
    if (::ftruncate(fd, 0) != 0) finding("ftruncate failed", "");
    size_t done = 0;
    while (done < size) {
      const ssize_t w = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) finding("pwrite failed", "");
      done += static_cast<size_t>(w);
    }
  }
};

uint64_t le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// numel * element size, or false when that overflows 64 bits or a dimension is negative.
bool byte_count(const moet::StTensorInfo& ti, uint64_t* bytes) {
  uint64_t n = 1;
  for (int64_t d : ti.shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  return !__builtin_mul_overflow(n, moet::st_dtype_size(ti.dtype), bytes);
}

bool is_float(StDType t) {
  return t == StDType::F32 || t == StDType::F64 || t == StDType::BF16 || t == StDType::F16;
}

bool is_small_int(StDType t) {
  return t == StDType::I32 || t == StDType::I16 || t == StDType::U16 || t == StDType::I8 ||
         t == StDType::U8 || t == StDType::BOOL;
}

// The stored integer at element i, widened (integer dtypes only).
int64_t stored_int(StDType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case StDType::BOOL:
    case StDType::U8:
      return p[i];
    case StDType::I8:
      return static_cast<int8_t>(p[i]);
    case StDType::I16: {
      int16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return v;
    }
    case StDType::U16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return v;
    }
    case StDType::I32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
  }
}

bool fits_i32(StDType t, const uint8_t* p, int64_t n) {
  if (is_small_int(t)) return true;
  if (t != StDType::I64) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = stored_int(t, p, i);
    if (v < INT32_MIN || v > INT32_MAX) return false;
  }
  return true;
}

// Every read of one tensor, against the stored bytes `p`.
void exercise_reads(const moet::SafetensorsReader& r, const moet::StTensorInfo& ti,
                    const uint8_t* p) {
  const std::string& name = ti.name;
  const int64_t n = ti.numel();
  const bool as_float = is_float(ti.dtype);
  const bool as_int = fits_i32(ti.dtype, p, n);

  std::vector<float> f32;
  expect(as_float, "read_f32", name, [&] { f32 = r.read_f32(name); });
  if (as_float && static_cast<int64_t>(f32.size()) != n) finding("read_f32 size", name);
  if (ti.dtype == StDType::F32 && n > 0 && std::memcmp(f32.data(), p, 4 * n) != 0)
    finding("read_f32 of F32 changed the bits", name);
  if (ti.dtype == StDType::BF16)
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      const float want = moet::bf16_to_float(b);
      if (std::memcmp(&f32[i], &want, 4) != 0) finding("read_f32 of BF16 changed the bits", name);
    }

  std::vector<double> f64(static_cast<size_t>(n));
  expect(as_float, "read_f64", name, [&] { r.read_f64(name, f64.data(), n); });
  if (ti.dtype == StDType::F64 && n > 0 && std::memcmp(f64.data(), p, 8 * n) != 0)
    finding("read_f64 of F64 changed the bits", name);

  std::vector<int32_t> i32;
  expect(as_int, "read_i32", name, [&] { i32 = r.read_i32(name); });
  if (as_int)
    for (int64_t i = 0; i < n; ++i)
      if (i32[i] != stored_int(ti.dtype, p, i)) finding("read_i32 changed a value", name);

  // A count that is not the element count is rejected, whatever the dtype.
  std::vector<float> one_more(static_cast<size_t>(n) + 1);
  expect(false, "read_f32 with a wrong count", name,
         [&] { r.read_f32(name, one_more.data(), n + 1); });

  if (ti.shape.size() > moet::Tensor::kMaxDims) return;
  auto tensor_of = [&](void* mem, moet::DType t) {
    moet::Tensor dst;
    dst.ptr = mem;
    dst.dtype = t;
    dst.ndim = static_cast<int>(ti.shape.size());
    for (int d = 0; d < dst.ndim; ++d) dst.shape[d] = ti.shape[d];
    return dst;
  };
  std::vector<float> into_f32(static_cast<size_t>(n));
  expect(as_float, "read_into F32", name,
         [&] { r.read_into(name, tensor_of(into_f32.data(), moet::DType::F32)); });
  if (as_float && n > 0 && std::memcmp(into_f32.data(), f32.data(), 4 * n) != 0)
    finding("read_into F32 differs from read_f32", name);
  std::vector<double> into_f64(static_cast<size_t>(n));
  expect(as_float, "read_into F64", name,
         [&] { r.read_into(name, tensor_of(into_f64.data(), moet::DType::F64)); });
  std::vector<int32_t> into_i32(static_cast<size_t>(n));
  expect(as_int, "read_into I32", name,
         [&] { r.read_into(name, tensor_of(into_i32.data(), moet::DType::I32)); });
  if (as_int && into_i32 != i32) finding("read_into I32 differs from read_i32", name);
  std::vector<uint16_t> into_bf16(static_cast<size_t>(n));
  const bool bf16_ok = ti.dtype == StDType::BF16 || ti.dtype == StDType::F32;
  expect(bf16_ok, "read_into BF16", name,
         [&] { r.read_into(name, tensor_of(into_bf16.data(), moet::DType::BF16)); });
  if (ti.dtype == StDType::BF16 && n > 0 && std::memcmp(into_bf16.data(), p, 2 * n) != 0)
    finding("read_into BF16 of BF16 changed the bits", name);
  std::vector<uint8_t> into_u8(static_cast<size_t>(n));
  expect(false, "read_into U8", name,
         [&] { r.read_into(name, tensor_of(into_u8.data(), moet::DType::U8)); });

  // A destination of another shape is rejected: one more dimension of size 1.
  if (ti.shape.size() < moet::Tensor::kMaxDims) {
    moet::Tensor wrong = tensor_of(into_f32.data(), moet::DType::F32);
    wrong.shape[wrong.ndim++] = 1;
    expect(false, "read_into with another shape", name, [&] { r.read_into(name, wrong); });
  }
}

// Checks an accepted file: the tensor table against the input bytes, then every accessor.
void exercise(const moet::SafetensorsReader& r, const uint8_t* data, size_t size) {
  const uint64_t header_len = le64(data);
  const uint8_t* section = data + 8 + header_len;  // accepted, so the header fits
  const uint64_t section_size = size - 8 - header_len;

  const std::vector<std::string> names = r.names();
  if (names.size() != r.size()) finding("names() and size() disagree", "");
  for (size_t i = 1; i < names.size(); ++i)
    if (!(names[i - 1] < names[i])) finding("names() not strictly ascending", names[i]);

  for (const std::string& name : names) {
    if (!r.contains(name)) finding("contains() is false for a listed name", name);
    const moet::StTensorInfo& ti = r.info(name);
    if (ti.name != name) finding("info() names another tensor", name);
    uint64_t bytes = 0;
    if (!byte_count(ti, &bytes)) finding("accepted a shape whose byte size overflows", name);
    if (ti.begin > ti.end || ti.end > section_size) finding("data range outside the file", name);
    if (ti.end - ti.begin != bytes) finding("data range does not match shape and dtype", name);
    if (ti.shape_str().empty()) finding("empty shape_str()", name);
    const auto* raw = static_cast<const uint8_t*>(r.raw(name));
    if (bytes > 0 && std::memcmp(raw, section + ti.begin, bytes) != 0)
      finding("raw() is not the file's bytes", name);
    if (ti.numel() <= kMaxReadElements) exercise_reads(r, ti, section + ti.begin);
  }

  std::string absent = "absent";
  while (r.contains(absent)) absent += '_';
  expect(false, "info() of a name not in the file", absent, [&] { r.info(absent); });
  expect(false, "read_f32() of a name not in the file", absent, [&] { r.read_f32(absent); });

  size_t metadata_bytes = 0;
  for (const auto& [k, v] : r.metadata()) metadata_bytes += k.size() + v.size();
  if (metadata_bytes > size) finding("metadata larger than the file", "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const InputFile file;
  file.write(data, size);
  std::optional<moet::SafetensorsReader> reader;
  try {
    reader.emplace(file.path);
  } catch (const moet::Error&) {
    return 0;  // the expected rejection of a bad file
  }
  try {
    exercise(*reader, data, size);
    // Moving keeps the mapping valid in the new owner and leaves the old one harmless.
    moet::SafetensorsReader moved(std::move(*reader));
    exercise(moved, data, size);
    *reader = std::move(moved);
    exercise(*reader, data, size);
  } catch (const moet::Error& e) {
    finding(std::string("an accepted file threw: ") + e.what(), "");
  }
  return 0;
}
