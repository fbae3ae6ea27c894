// emit.h — how a producing op writes the GEMM operands of its output as it goes (ops::Operand,
// docs/kernels.md "Operands"): it computes its output in row chunks whose boundaries are the
// operand's block boundaries, and right after each chunk (still in cache) quantizes it into the
// operand's rows and cols copies. The values are those ops::quantize gives for the whole tensor:
// row blocks lie within a row, and column blocks within a chunk.
#pragma once
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/common.h"
#include "kernels/ops.h"

namespace moet::ops::cpu {

// Quantizes the R×C fp32 rows at x (row stride C) into q (same layout, F32 or BF16 bits) with
// blocks along `axis` counted from x's first row — ops::quantize without profiling, on the
// calling thread inside a parallel region (quantize.cpp).
void quantize_span(const float* x, int64_t R, int64_t C, Format f, BlockAxis axis, void* q,
                   DType qt);

// Bytes an op writes into q's copies (for the op profiler): rows unless it is `out` itself, cols.
inline double operand_bytes(const Operand& q, const void* out = nullptr) {
  return double((q.rows.ptr != out ? q.rows.bytes() : 0) + q.cols.bytes());
}

// Rows of a column block of q's cols copy (1 when it has none: any row is a boundary).
inline int64_t emit_align(const Operand& q) {
  return !q.cols.empty() && is_fp8(q.fmt) ? format_block(q.fmt) : 1;
}

// Writes rows [r0, r1) of q's copies from their fp32 values y (row r at y + (r - r0)·C). The
// range must start and end on column-block boundaries of q (for_each_chunk's chunks do), except
// at the end of the tensor or of a segment. Column blocks first, so rows may be y itself.
inline void emit_rows(const Operand& q, const float* y, int64_t r0, int64_t r1, int64_t C) {
  if (r1 <= r0) return;
  if (!q.cols.empty() && is_fp8(q.fmt)) {
    const size_t es = dtype_size(q.cols.dtype);
    auto span = [&](int64_t a, int64_t b) {
      quantize_span(y + (a - r0) * C, b - a, C, q.fmt, BlockAxis::Cols,
                    static_cast<char*>(q.cols.ptr) + size_t(a * C) * es, q.cols.dtype);
    };
    if (q.segments.empty()) {
      span(r0, r1);
    } else {  // blocks restart at each segment: one span per segment met
      const int32_t* off = q.segments.i32();
      const int64_t G = q.segments.numel() - 1;
      const int64_t g0 = std::upper_bound(off, off + G + 1, int32_t(r0)) - off - 1;
      for (int64_t g = std::max<int64_t>(g0, 0); g < G && off[g] < r1; ++g)
        span(std::max<int64_t>(r0, off[g]), std::min<int64_t>(r1, off[g + 1]));
    }
  }
  if (!q.rows.empty()) {
    const size_t es = dtype_size(q.rows.dtype);
    quantize_span(y, r1 - r0, C, q.fmt, BlockAxis::Rows,
                  static_cast<char*>(q.rows.ptr) + size_t(r0 * C) * es, q.rows.dtype);
  }
}

// The chunk boundaries of [0, R) for a producer writing q (C elements a row): chunks of about
// 16k elements (in cache when emitted), starting on q's column-block boundaries — multiples of
// emit_align(q) from row 0, or from each segment's first row. Returns the count; starts[count]
// = R. Grow-only thread-local memory.
inline int64_t chunk_starts(int64_t R, int64_t C, const Operand& q, const int64_t*& starts) {
  const int64_t b = emit_align(q);
  const int64_t step = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(C, 1) / b) * b;
  const bool segmented = b > 1 && !q.segments.empty();
  const int64_t G = segmented ? q.segments.numel() - 1 : 1;
  int64_t* s = scratch<int64_t>(size_t(R / step + G + 2), 3);
  int64_t n = 0;
  if (!segmented) {
    for (int64_t r = 0; r < R; r += step) s[n++] = r;
  } else {
    const int32_t* off = q.segments.i32();
    MOET_ASSERT(off[0] == 0 && off[G] == R);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r = off[g]; r < off[g + 1]; r += step) s[n++] = r;
  }
  s[n] = R;
  starts = s;
  return n;
}

// Calls fn(r0, r1) for each chunk of [0, R) (chunk_starts), the chunks spread over the threads in
// contiguous runs (one thread when fewer than kParallelMin elements).
template <typename Fn>
void for_each_chunk(int64_t R, int64_t C, const Operand& q, Fn&& fn) {
  const int64_t* starts = nullptr;
  const int64_t n = chunk_starts(R, C, q, starts);
  const int64_t per_chunk = std::max<int64_t>(1, R * C / std::max<int64_t>(n, 1));
  parallel_ranges_min(n, std::max<int64_t>(2, kParallelMin / per_chunk),
                      [&](int64_t c0, int64_t c1) {
                        for (int64_t c = c0; c < c1; ++c) fn(starts[c], starts[c + 1]);
                      });
}

// A producer of an [R, C] output: fn(r0, r1, out) computes rows [r0, r1) into out (row r at
// out + (r - r0)·C) — y's own rows, or a thread-local tile when y is null (only q is wanted) —
// and q's copies of those rows are written right after (F32 outputs; F64 ones, in tests, have
// none).
template <typename T, typename Fn>
void produce_rows(int64_t R, int64_t C, T* y, const Operand& q, Fn&& fn) {
  for_each_chunk(R, C, q, [&](int64_t r0, int64_t r1) {
    T* out = y ? y + r0 * C : scratch<T>(size_t((r1 - r0) * C), 3);
    fn(r0, r1, out);
    if constexpr (std::is_same_v<T, float>) emit_rows(q, out, r0, r1, C);
  });
}

// All of q from the fp32 rows x ([R, C]): chunk by chunk over the threads (quantize_operand).
inline void emit_all(const Operand& q, const float* x, int64_t R, int64_t C) {
  for_each_chunk(R, C, q, [&](int64_t r0, int64_t r1) { emit_rows(q, x + r0 * C, r0, r1, C); });
}

}  // namespace moet::ops::cpu
