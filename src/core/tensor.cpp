#include "core/tensor.h"

namespace moet {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::U8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::U8:
      return "U8";
  }
  return "?";
}

Tensor::Tensor(void* p, DType t, std::initializer_list<int64_t> dims) : ptr(p), dtype(t) {
  MOET_ASSERT(dims.size() <= kMaxDims);
  for (int64_t d : dims) shape[ndim++] = d;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor v(ptr, dtype, dims);
  MOET_ASSERT(v.numel() == numel());
  return v;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  MOET_ASSERT(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0]);
  Tensor v = *this;
  v.shape[0] = end - begin;
  // a tensor without memory (a planned shape) stays without memory
  if (ptr) v.ptr = static_cast<char*>(ptr) + begin * (numel() / shape[0]) * dtype_size(dtype);
  return v;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace moet
