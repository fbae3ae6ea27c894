#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <utility>

#include "core/bf16.h"
#include "core/error.h"
#include "core/json_depth_limit.h"
#include "core/mapped_file.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data are little-endian; moet assumes a little-endian host");

namespace moet {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the limit Hugging Face's reader enforces

struct DTypeEntry {
  StDType t;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},   {StDType::I8, "I8", 1},
    {StDType::U16, "U16", 2},   {StDType::I16, "I16", 2}, {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::U32, "U32", 4}, {StDType::I32, "I32", 4},
    {StDType::F32, "F32", 4},   {StDType::U64, "U64", 8}, {StDType::I64, "I64", 8},
    {StDType::F64, "F64", 8},
};

const DTypeEntry& entry(StDType t) {
  for (const auto& e : kDTypes)
    if (e.t == t) return e;
  MOET_FAIL("unknown safetensors dtype code ", static_cast<int>(t));
}

std::string errno_text() { return std::strerror(errno); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Element count, or -1 on overflow / negative dims.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

// Converts n stored elements of type `src` to floating type Out.
template <typename Out>
bool convert_float(StDType src, const unsigned char* p, Out* dst, int64_t n) {
  switch (src) {
    case StDType::F32:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(load<float>(p + 4 * i));
      return true;
    case StDType::F64:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Out>(load<double>(p + 8 * i));
      return true;
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load<uint16_t>(p + 2 * i));
      return true;
    case StDType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load<uint16_t>(p + 2 * i));
      return true;
    default:
      return false;
  }
}

template <typename In>
void widen_int(const unsigned char* p, int32_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int32_t>(load<In>(p + sizeof(In) * i));
}

uint64_t json_u64(const nlohmann::json& v, const std::string& what) {
  MOET_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what,
             " must be a non-negative integer, found ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace

const char* st_dtype_name(StDType t) { return entry(t).name; }
size_t st_dtype_size(StDType t) { return entry(t).size; }

StDType st_dtype_from_name(const std::string& name, const std::string& context) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.t;
  MOET_FAIL(context, ": unsupported safetensors dtype '", name, "'");
}

StDType st_dtype_of(DType t) {
  switch (t) {
    case DType::F32:
      return StDType::F32;
    case DType::F64:
      return StDType::F64;
    case DType::BF16:
      return StDType::BF16;
    case DType::I32:
      return StDType::I32;
    case DType::U8:
      return StDType::U8;
  }
  MOET_FAIL("unknown tensor dtype code ", static_cast<int>(t));
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StTensorInfo::shape_str() const { return shape_text(shape); }

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(const std::string& path)
    : path_(path), file_(path, "safetensors file") {
  const size_t size = file_.size();
  MOET_CHECK(size >= 8, "safetensors file '", path, "' is truncated: ", size,
             " bytes, fewer than the 8-byte header length");
  const unsigned char* map = file_.data();
  const uint64_t header_len = load<uint64_t>(map);
  MOET_CHECK(header_len <= kMaxHeaderBytes && header_len <= size - 8, "safetensors file '", path,
             "' is truncated or not a safetensors file: header length ", header_len,
             " but the file has ", size - 8, " bytes after the length field");
  data_ = map + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        map + 8, map + 8 + header_len,
        json_depth_limit("safetensors file '" + path + "' has a corrupt JSON header"));
  } catch (const nlohmann::json::exception& e) {
    MOET_FAIL("safetensors file '", path, "' has a corrupt JSON header: ", e.what());
  }
  MOET_CHECK(header.is_object(), "safetensors file '", path,
             "' has a corrupt header: expected a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, v] : header.items()) {
    const std::string ctx = "safetensors file '" + path + "', tensor '" + name + "'";
    if (name == "__metadata__") {
      MOET_CHECK(v.is_object(), "safetensors file '", path,
                 "': __metadata__ must be an object of strings");
      for (const auto& [k, val] : v.items()) {
        MOET_CHECK(val.is_string(), "safetensors file '", path, "': __metadata__ value of '", k,
                   "' must be a string, found ", val.dump());
        metadata_[k] = val.get<std::string>();
      }
      continue;
    }
    MOET_CHECK(
        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
        ctx, ": entry must be an object with dtype, shape and data_offsets");
    MOET_CHECK(v["dtype"].is_string(), ctx, ": dtype must be a string");
    StTensorInfo info;
    info.name = name;
    info.dtype = st_dtype_from_name(v["dtype"].get<std::string>(), ctx);
    MOET_CHECK(v["shape"].is_array(), ctx, ": shape must be an array");
    for (const auto& d : v["shape"])
      info.shape.push_back(static_cast<int64_t>(json_u64(d, ctx + ": shape entry")));
    const auto& off = v["data_offsets"];
    MOET_CHECK(off.is_array() && off.size() == 2, ctx, ": data_offsets must be [begin, end]");
    info.begin = json_u64(off[0], ctx + ": data_offsets[0]");
    info.end = json_u64(off[1], ctx + ": data_offsets[1]");
    MOET_CHECK(info.begin <= info.end, ctx, ": data_offsets [", info.begin, ", ", info.end,
               "] are reversed");
    MOET_CHECK(info.end <= data_size, "safetensors file '", path, "' is truncated: tensor '", name,
               "' ends at data byte ", info.end, " but the data section has ", data_size, " bytes");
    const int64_t n = checked_numel(info.shape);
    // Too large also when its byte count would not fit in 64 bits (it would wrap around).
    MOET_CHECK(n >= 0 && static_cast<uint64_t>(n) <= UINT64_MAX / st_dtype_size(info.dtype), ctx,
               ": shape ", info.shape_str(), " is too large");
    MOET_CHECK(info.end - info.begin == static_cast<uint64_t>(n) * st_dtype_size(info.dtype), ctx,
               ": ", info.end - info.begin, " bytes stored but shape ", info.shape_str(), " of ",
               st_dtype_name(info.dtype), " needs ",
               static_cast<uint64_t>(n) * st_dtype_size(info.dtype));
    if (info.end > info.begin) ranges.emplace_back(info.begin, info.end);
    tensors_.emplace(name, std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    MOET_CHECK(ranges[i].first >= ranges[i - 1].second, "safetensors file '", path,
               "' is corrupt: tensor data ranges overlap at byte ", ranges[i].first);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept { *this = std::move(o); }

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& o) noexcept {
  if (this != &o) {
    path_ = std::move(o.path_);
    file_ = std::move(o.file_);
    data_ = std::exchange(o.data_, nullptr);
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

const StTensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  MOET_CHECK(it != tensors_.end(), "tensor '", name, "' not found in '", path_, "' (it holds ",
             tensors_.size(), " tensors", tensors_.empty() ? "" : ", e.g. '",
             tensors_.empty() ? "" : tensors_.begin()->first, tensors_.empty() ? "" : "'", ")");
  return it->second;
}

const void* SafetensorsReader::raw(const std::string& name) const {
  return data_ + info(name).begin;
}

const StTensorInfo& SafetensorsReader::checked(const std::string& name, int64_t count) const {
  const StTensorInfo& ti = info(name);
  MOET_CHECK(ti.numel() == count, "tensor '", name, "' in '", path_, "': expected ", count,
             " elements, found ", ti.numel(), " (shape ", ti.shape_str(), ")");
  return ti;
}

void SafetensorsReader::read_f32(const std::string& name, float* dst, int64_t count) const {
  const StTensorInfo& ti = checked(name, count);
  MOET_CHECK(convert_float(ti.dtype, data_ + ti.begin, dst, count), "tensor '", name, "' in '",
             path_, "' is ", st_dtype_name(ti.dtype), "; cannot read it as floating point");
}

void SafetensorsReader::read_f64(const std::string& name, double* dst, int64_t count) const {
  const StTensorInfo& ti = checked(name, count);
  MOET_CHECK(convert_float(ti.dtype, data_ + ti.begin, dst, count), "tensor '", name, "' in '",
             path_, "' is ", st_dtype_name(ti.dtype), "; cannot read it as floating point");
}

void SafetensorsReader::read_i32(const std::string& name, int32_t* dst, int64_t count) const {
  const StTensorInfo& ti = checked(name, count);
  const unsigned char* p = data_ + ti.begin;
  switch (ti.dtype) {
    case StDType::I32:
      // An empty destination may be null, which memcpy does not allow even for 0 bytes.
      if (count > 0) std::memcpy(dst, p, count * sizeof(int32_t));
      return;
    case StDType::I16:
      widen_int<int16_t>(p, dst, count);
      return;
    case StDType::U16:
      widen_int<uint16_t>(p, dst, count);
      return;
    case StDType::I8:
      widen_int<int8_t>(p, dst, count);
      return;
    case StDType::U8:
    case StDType::BOOL:
      widen_int<uint8_t>(p, dst, count);
      return;
    case StDType::I64:
      for (int64_t i = 0; i < count; ++i) {
        const int64_t v = load<int64_t>(p + 8 * i);
        MOET_CHECK(
            v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
            "tensor '", name, "' in '", path_, "': element ", i, " = ", v,
            " does not fit in int32");
        dst[i] = static_cast<int32_t>(v);
      }
      return;
    default:
      MOET_FAIL("tensor '", name, "' in '", path_, "' is ", st_dtype_name(ti.dtype),
                "; cannot read it as int32");
  }
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  std::vector<float> v(info(name).numel());
  read_f32(name, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

std::vector<int32_t> SafetensorsReader::read_i32(const std::string& name) const {
  std::vector<int32_t> v(info(name).numel());
  read_i32(name, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

void SafetensorsReader::read_into(const std::string& name, const Tensor& dst) const {
  const StTensorInfo& ti = info(name);
  bool same = ti.shape.size() == static_cast<size_t>(dst.ndim);
  for (int i = 0; same && i < dst.ndim; ++i) same = ti.shape[i] == dst.shape[i];
  MOET_CHECK(same, "tensor '", name, "' in '", path_, "': expected shape ", dst.shape_str(),
             ", found ", ti.shape_str());
  MOET_CHECK(dst.ptr != nullptr || dst.numel() == 0, "tensor '", name,
             "': destination has no memory");
  const int64_t n = dst.numel();
  switch (dst.dtype) {
    case DType::F32:
      read_f32(name, dst.data<float>(), n);
      return;
    case DType::F64:
      read_f64(name, dst.data<double>(), n);
      return;
    case DType::I32:
      read_i32(name, dst.data<int32_t>(), n);
      return;
    case DType::BF16: {
      auto* out = dst.data<uint16_t>();
      const unsigned char* p = data_ + ti.begin;
      if (ti.dtype == StDType::BF16) {
        if (n > 0) std::memcpy(out, p, n * sizeof(uint16_t));  // `out` may be null when empty
      } else {
        MOET_CHECK(ti.dtype == StDType::F32, "tensor '", name, "' in '", path_, "' is ",
                   st_dtype_name(ti.dtype), "; a BF16 destination needs BF16 or F32 data");
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(load<float>(p + 4 * i));
      }
      return;
    }
    case DType::U8:
      break;
  }
  MOET_FAIL("tensor '", name, "': unsupported destination dtype");
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

// Writes all of [p, p+n) to fd; false on error (errno set).
bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                       const Metadata& metadata) {
  MOET_CHECK(!path.empty(), "safetensors output path is empty");
  // Validate everything before touching the file system.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return st_dtype_size(tensors[a].dtype) > st_dtype_size(tensors[b].dtype);
  });
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (size_t i : order) {
    const StTensorRef& t = tensors[i];
    MOET_CHECK(!t.name.empty(), "cannot write '", path, "': a tensor has an empty name");
    MOET_CHECK(t.name != "__metadata__", "cannot write '", path,
               "': '__metadata__' is reserved and cannot name a tensor");
    MOET_CHECK(!header.contains(t.name), "cannot write '", path, "': tensor name '", t.name,
               "' appears twice");
    const int64_t n = checked_numel(t.shape);
    MOET_CHECK(n >= 0, "cannot write '", path, "': tensor '", t.name, "' has invalid shape ",
               shape_text(t.shape));
    MOET_CHECK(t.data != nullptr || n == 0, "cannot write '", path, "': tensor '", t.name,
               "' has no data");
    const uint64_t bytes = static_cast<uint64_t>(n) * st_dtype_size(t.dtype);
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // data start 8-byte aligned
  const uint64_t header_len = text.size();

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MOET_CHECK(fd >= 0, "cannot create '", tmp, "' to write '", path, "': ", errno_text(),
             " (is the directory writable and is there space?)");
  bool ok = write_all(fd, &header_len, 8) && write_all(fd, text.data(), text.size());
  for (size_t k = 0; ok && k < order.size(); ++k) {
    const StTensorRef& t = tensors[order[k]];
    const uint64_t bytes = static_cast<uint64_t>(checked_numel(t.shape)) * st_dtype_size(t.dtype);
    if (bytes > 0) ok = write_all(fd, t.data, bytes);
  }
  if (ok) ok = ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    MOET_FAIL("failed writing safetensors file '", path, "': ", std::strerror(err),
              " (any existing file was left unchanged)");
  }
  // Make the rename itself durable.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void SafetensorsWriter::add(const std::string& name, StDType dtype, std::vector<int64_t> shape,
                            const void* data) {
  tensors_.push_back({name, dtype, std::move(shape), data});
}

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  add(name, st_dtype_of(t.dtype), std::vector<int64_t>(t.shape, t.shape + t.ndim), t.ptr);
}

}  // namespace moet
