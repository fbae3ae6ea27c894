#include "metrics/gemm_peak.h"

#include <algorithm>
#include <chrono>

#include "core/arena.h"
#include "kernels/ops.h"

namespace moet {

double measure_gemm_peak_tflops() {
  constexpr int64_t n = 1024;
  Arena arena(3 * n * n * sizeof(float));
  Tensor a = arena.alloc_f32({n, n}), b = arena.alloc_f32({n, n}), c = arena.alloc_f32({n, n});
  ops::fill(a, 0.5);
  ops::fill(b, 0.25);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    ops::gemm(a, false, b, true, c);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 2.0 * n * n * n / s / 1e12);
  }
  return best;
}

}  // namespace moet
