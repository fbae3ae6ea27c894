// tree_sum: the canonical order in which moet adds contributions that live on different ranks
// (or different experts), so that how they are spread never changes the bits.
#pragma once
#include <cstdint>
#include <cstring>

namespace moet {

// The canonical reduction order: sum(lo, hi) = sum(lo, mid) + sum(mid, hi) with
// mid = lo + the largest power of two below hi - lo. value(i) gives contribution i.
// The size of the left part when `count` (>= 2) contributions are split: the largest power of
// two below count.
template <typename I>
I tree_split(I count) {
  I half = 1;
  while (half * 2 < count) half *= 2;
  return half;
}

template <typename T, typename Get>
T tree_sum(int lo, int hi, const Get& value) {
  if (hi - lo == 1) return value(lo);
  const int half = tree_split(hi - lo);
  return tree_sum<T>(lo, lo + half, value) + tree_sum<T>(lo + half, hi, value);
}

// The same order over count arrays of n values stored back to back: the element-wise canonical
// sum lands in `out` when given, else in parts[0, n). The arrays are overwritten with partial
// sums (all but the first when `out` is given).
template <typename T>
void tree_sum_arrays(T* parts, int64_t count, int64_t n, T* out = nullptr) {
  if (count <= 0) return;
  if (count == 1) {
    if (out) std::memcpy(out, parts, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  const int64_t half = tree_split(count);
  tree_sum_arrays(parts, half, n);
  tree_sum_arrays(parts + half * n, count - half, n);
  const T* __restrict right = parts + half * n;
  if (out) {
    const T* __restrict left = parts;
    T* __restrict sum = out;
    for (int64_t i = 0; i < n; ++i) sum[i] = left[i] + right[i];
  } else {
    T* __restrict left = parts;
    for (int64_t i = 0; i < n; ++i) left[i] += right[i];
  }
}

}  // namespace moet
