#include "measure/best_of.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace moet {

void flush_caches() {
  static std::vector<char> junk(size_t(96) << 20);
  static char value = 0;
  ++value;
  std::fill(junk.begin(), junk.end(), value);
}

double best_seconds(const std::function<void()>& fn, const BestOf& how) {
  for (int i = 0; i < how.warmups; ++i) fn();
  double best = 1e30, total = 0;
  for (int n = 0; (n < how.min_calls || total < how.min_seconds) && n < how.max_calls; ++n) {
    if (how.cold_caches) flush_caches();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

}  // namespace moet
