// common.h — private helpers of the CPU kernels: dtype dispatch, shape checks, row counts and
// grow-only thread-local scratch buffers.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace moet::ops::cpu {

// Loops over less work than this (elements touched) run on the calling thread: a parallel
// region costs microseconds, more when the cores are busy. Results do not depend on it.
constexpr int64_t kParallelMin = 1 << 14;

// Calls fn(T{}) with T = float or double according to the dtype of a floating tensor.
template <typename Fn>
decltype(auto) dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(float{});
    case DType::F64:
      return fn(double{});
    default:
      break;
  }
  MOET_FAIL("op needs an F32 or F64 tensor, got ", dtype_name(t));
}

inline bool is_float(DType t) { return t == DType::F32 || t == DType::F64; }

// Every present (non-empty) tensor among `ts` has dtype `t`.
inline void check_dtype(DType t, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* x : ts)
    MOET_CHECK(x->empty() || x->dtype == t, "dtype mismatch: expected ", dtype_name(t), ", got ",
               dtype_name(x->dtype), " (shape ", x->shape_str(), ")");
}

inline void check_i32(const Tensor& t) {
  MOET_CHECK(t.dtype == DType::I32, "index tensor must be I32, got ", dtype_name(t.dtype));
}

// Number of rows when the last dimension is the row length.
inline int64_t rows_of(const Tensor& t) {
  MOET_ASSERT(t.ndim >= 1);
  const int64_t w = t.size(-1);
  return w == 0 ? 0 : t.numel() / w;
}

// Grow-only scratch, one per thread and element type: no allocation once warmed up.
template <typename T>
T* scratch(size_t n, int slot = 0) {
  static thread_local std::vector<T> buf[4];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

template <typename T>
inline T sigmoid(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

}  // namespace moet::ops::cpu
