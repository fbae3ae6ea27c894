// common.h — private helpers of the CPU kernels: dtype dispatch, shape checks, row counts and
// grow-only thread-local scratch buffers.
#pragma once
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace moet::ops::cpu {

// Whether blas_gemm's BF16 overload runs on bf16 instructions (else it widens to fp32).
bool bf16_gemm_native();
// Whether the CPU has AVX-512 (as oneDNN sees it): blas_gemm picks its library by it.
bool cpu_has_avx512();

// Loops over less work than this (elements touched) run on the calling thread: a parallel
// region costs microseconds, more when the cores are busy. Results do not depend on it.
constexpr int64_t kParallelMin = 1 << 14;

// Calls fn(begin, end) on contiguous ranges covering [0, n), one per OpenMP thread, or once on
// the calling thread when n < min_items or when already inside a parallel region (an op called
// from a thread of another op's loop runs on that thread). Loops inside fn see plain locals, not
// the shared variables of an outlined parallel region, so the compiler vectorises them.
template <typename Fn>
void parallel_ranges_min(int64_t n, int64_t min_items, Fn&& fn) {
  if (n < min_items || n < 2 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + threads - 1) / threads;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
  }
}

// parallel_ranges_min for n elements touched: small loops stay on the calling thread.
template <typename Fn>
void parallel_ranges(int64_t n, Fn&& fn) {
  parallel_ranges_min(n, kParallelMin + 1, std::forward<Fn>(fn));
}

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

// Grow-only scratch, one per thread and element type: no allocation once warmed up. Slots 0..3
// belong to the kernels, 4..7 to the GEMM operand temporaries (operands.h), 8..9 to blas.cpp,
// 10..14 to the FP4 operands (fp4_operands.cpp, grouped_gemm.cpp), 15 to the experts' FP4
// tokens (quantize_fp4_segments, encode_fp4_rows).
template <typename T>
T* scratch(size_t n, int slot = 0) {
  static thread_local std::vector<T> buf[16];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

// e^x in float without a library call, so loops that use it vectorise: x = n ln2 + r with
// |r| <= ln2/2, e^r by Cephes' expf polynomial (about 1 ulp), 2^n built in the exponent bits.
// Inputs are clamped to [-87, 88] (results stay normal floats).
inline float exp_fast(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // round(x / ln2) by the 1.5·2^23 trick: plain adds, so it vectorises (|x / ln2| < 2^22)
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}
// Doubles (the finite-difference tests) keep the library's exp.
inline double exp_fast(double x) { return std::exp(x); }

// x[i] = exp_fast(x[i] - m), i < n, in place (a plain loop over a restrict pointer: vectorised).
template <typename T>
inline void exp_shifted(T* __restrict x, int64_t n, T m) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = exp_fast(x[i] - m);
}

// The largest of x[0, n) (n >= 1), vectorised (no NaN among the values).
template <typename T>
inline T max_of(const T* __restrict x, int64_t n) {
  T m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Σ x[0, n) in a fixed order: 8 interleaved partial sums, combined 0..7 (vectorised, the same
// for every call of the same n).
template <typename T>
inline T sum_of(const T* __restrict x, int64_t n) {
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += x[i + j];
  for (int j = 0; i < n; ++i, ++j) lane[j] += x[i];
  T s = 0;
  for (int j = 0; j < 8; ++j) s += lane[j];
  return s;
}

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + exp_fast(-x));
}

}  // namespace moet::ops::cpu
