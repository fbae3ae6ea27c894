// tree_sum: the canonical order in which moet adds contributions that live on different ranks
// (or different experts), so that how they are spread never changes the bits.
#pragma once
#include <cstdint>

namespace moet {

// The canonical reduction order: sum(lo, hi) = sum(lo, mid) + sum(mid, hi) with
// mid = lo + the largest power of two below hi - lo. value(i) gives contribution i.
template <typename T, typename Get>
T tree_sum(int lo, int hi, const Get& value) {
  if (hi - lo == 1) return value(lo);
  int half = 1;
  while (half * 2 < hi - lo) half *= 2;
  return tree_sum<T>(lo, lo + half, value) + tree_sum<T>(lo + half, hi, value);
}

// The same order over count arrays of n values stored back to back: afterwards parts[0, n) is
// their element-wise canonical sum (the other arrays are overwritten with partial sums).
template <typename T>
void tree_sum_arrays(T* parts, int64_t count, int64_t n) {
  if (count <= 1) return;
  int64_t half = 1;
  while (half * 2 < count) half *= 2;
  tree_sum_arrays(parts, half, n);
  tree_sum_arrays(parts + half * n, count - half, n);
  const T* right = parts + half * n;
  for (int64_t i = 0; i < n; ++i) parts[i] += right[i];
}

}  // namespace moet
