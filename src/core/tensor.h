// Tensor: a non-owning view (pointer, dtype, shape) over memory that lives in an arena.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace moet {

enum class DType : uint8_t { F32, F64, BF16, I32, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct Tensor {
  static constexpr int kMaxDims = 4;
  void* ptr = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0};

  Tensor() = default;
  Tensor(void* p, DType t, std::initializer_list<int64_t> dims);

  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t numel() const;
  size_t bytes() const { return numel() * dtype_size(dtype); }
  bool empty() const { return ptr == nullptr; }

  float* f32() const {
    MOET_ASSERT(dtype == DType::F32);
    return static_cast<float*>(ptr);
  }
  double* f64() const {
    MOET_ASSERT(dtype == DType::F64);
    return static_cast<double*>(ptr);
  }
  template <typename T>
  T* data() const {
    return static_cast<T*>(ptr);
  }
  uint16_t* bf16() const {
    MOET_ASSERT(dtype == DType::BF16);
    return static_cast<uint16_t*>(ptr);
  }
  uint8_t* u8() const {
    MOET_ASSERT(dtype == DType::U8);
    return static_cast<uint8_t*>(ptr);
  }
  int32_t* i32() const {
    MOET_ASSERT(dtype == DType::I32);
    return static_cast<int32_t*>(ptr);
  }
  // Same memory, new shape of equal element count.
  Tensor view(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) along dimension 0.
  Tensor rows(int64_t begin, int64_t end) const;
  std::string shape_str() const;
};

}  // namespace moet
