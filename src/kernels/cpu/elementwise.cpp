// elementwise.cpp — copy, fill, add, scale and the fixed-order sum of squares.
#include <cstring>

#include "kernels/cpu/common.h"
#include "kernels/cpu/convert.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {
constexpr int64_t kSumChunk = 1 << 13;  // sum_squares: fixed chunk, independent of threads
}  // namespace

void copy(const Tensor& src, Tensor& dst) {
  OpScope op_scope("copy/add", 0, double(src.bytes() + dst.bytes()));
  MOET_CHECK(src.numel() == dst.numel(), "copy: ", src.shape_str(), " -> ", dst.shape_str());
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype) {
    const size_t es = dtype_size(src.dtype);
    const char* s = static_cast<const char*>(src.ptr);
    char* d = static_cast<char*>(dst.ptr);
    const int64_t chunk = kParallelMin, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; ++c) {
      const int64_t b = c * chunk, e = std::min(n, b + chunk);
      std::memcpy(d + b * es, s + b * es, (e - b) * es);
    }
    return;
  }
  if (src.dtype == DType::BF16 && dst.dtype == DType::F32) {  // widening: exact
    parallel_ranges(
        n, [&](int64_t i0, int64_t i1) { bf16_to_f32(src.bf16() + i0, dst.f32() + i0, i1 - i0); });
    return;
  }
  if (src.dtype == DType::F32 && dst.dtype == DType::BF16) {  // rounding to nearest even
    parallel_ranges(
        n, [&](int64_t i0, int64_t i1) { f32_to_bf16(src.f32() + i0, dst.bf16() + i0, i1 - i0); });
    return;
  }
  MOET_CHECK(is_float(src.dtype) && is_float(dst.dtype), "copy: cannot convert ",
             dtype_name(src.dtype), " to ", dtype_name(dst.dtype));
  dispatch_float(src.dtype, [&](auto s0) {
    dispatch_float(dst.dtype, [&](auto d0) {
      using S = decltype(s0);
      using D = decltype(d0);
      const S* s = src.data<S>();
      D* d = dst.data<D>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
    });
  });
}

void fill(Tensor& x, double value) {
  OpScope op_scope("copy/add", 0, double(x.bytes()));
  const int64_t n = x.numel();
  if (x.dtype == DType::I32) {
    int32_t* p = x.i32();
    const int32_t v = static_cast<int32_t>(value);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
    return;
  }
  dispatch_float(x.dtype, [&](auto t0) {
    using T = decltype(t0);
    T* p = x.data<T>();
    const T v = static_cast<T>(value);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  OpScope op_scope("copy/add", 0, 3.0 * double(out.bytes()));
  MOET_CHECK(a.numel() == b.numel() && a.numel() == out.numel(), "add: ", a.shape_str(), " + ",
             b.shape_str(), " -> ", out.shape_str());
  check_dtype(out.dtype, {&a, &b});
  const int64_t n = out.numel();
  dispatch_float(out.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  });
}

void add_inplace(Tensor& acc, const Tensor& x, double alpha) {
  OpScope op_scope("copy/add", 0, 3.0 * double(acc.bytes()));
  MOET_CHECK(acc.numel() == x.numel(), "add_inplace: ", acc.shape_str(), " += ", x.shape_str());
  check_dtype(acc.dtype, {&x});
  const int64_t n = acc.numel();
  dispatch_float(acc.dtype, [&](auto t0) {
    using T = decltype(t0);
    T* pa = acc.data<T>();
    const T* px = x.data<T>();
    const T al = static_cast<T>(alpha);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) pa[i] += al * px[i];
  });
}

void scale_inplace(Tensor& x, double alpha) {
  OpScope op_scope("copy/add", 0, 2.0 * double(x.bytes()));
  const int64_t n = x.numel();
  dispatch_float(x.dtype, [&](auto t0) {
    using T = decltype(t0);
    T* p = x.data<T>();
    const T al = static_cast<T>(alpha);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] *= al;
  });
}

// Σ x² in double: chunks of kSumChunk elements, each summed in 8 interleaved lanes (lane j
// takes the elements i ≡ j mod 8, so the loop vectorises without reassociation) then combined
// lane 0..7; chunk sums added in chunk order. The grouping never depends on the thread count.
double sum_squares(const Tensor& x) {
  OpScope op_scope("sum of squares", 0, double(x.bytes()));
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  return dispatch_float(x.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* p = x.data<T>();
    const int64_t nchunks = (n + kSumChunk - 1) / kSumChunk;
    double* part = scratch<double>(nchunks);
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; ++c) {
      const int64_t b = c * kSumChunk, e = std::min(n, b + kSumChunk);
      double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = b;
      for (; i + 8 <= e; i += 8)
        for (int j = 0; j < 8; ++j) {
          const double v = static_cast<double>(p[i + j]);
          lane[j] += v * v;
        }
      for (int j = 0; i < e; ++i, ++j) {
        const double v = static_cast<double>(p[i]);
        lane[j] += v * v;
      }
      double s = 0;
      for (int j = 0; j < 8; ++j) s += lane[j];
      part[c] = s;
    }
    double total = 0;
    for (int64_t c = 0; c < nchunks; ++c) total += part[c];
    return total;
  });
}

}  // namespace moet::ops
