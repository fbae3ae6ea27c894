// best_of.h — the benchmarks' timer: the fastest of `rounds` runs of fn, after one warm-up run.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>

namespace moet::bench {

inline double best_of(int rounds, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace moet::bench
