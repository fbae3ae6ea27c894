// tree_sum: the canonical order in which moet adds contributions that live on different ranks
// (or different experts), so that how they are spread never changes the bits.
#pragma once

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

}  // namespace moet
