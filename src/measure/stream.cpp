#include "measure/stream.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "measure/best_of.h"

namespace moet {

namespace {

// The last-level cache this CPU's first core sees: sysfs (what lscpu prints; inside a VM glibc's
// sysconf may report the host socket's), else sysconf, else 32 MiB.
int64_t last_level_cache_bytes() {
  for (int index = 4; index >= 2; --index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    int64_t n = 0;
    char unit = 0;
    if (f >> n >> unit && n > 0) return unit == 'M' ? n << 20 : unit == 'K' ? n << 10 : n;
  }
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? l3 : int64_t(32) << 20;
}

}  // namespace

int64_t stream_array_bytes() {
  return std::clamp<int64_t>(4 * last_level_cache_bytes(), int64_t(64) << 20, int64_t(1) << 30);
}

StreamBandwidth measure_stream(int64_t array_bytes) {
  const int64_t n = std::max<int64_t>(1024, array_bytes / int64_t(sizeof(float)));
  std::vector<float> a(size_t(n), 0.0f), b(size_t(n), 1.0f), c(size_t(n), 2.0f);
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const int threads = ops::num_threads();
  // static schedule: each thread touches the same part of the arrays in every call
  const auto copy = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i];
  };
  const auto triad = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
  };
  const BestOf how{.warmups = 2, .min_calls = 5, .min_seconds = 0.2, .max_calls = 1000};
  StreamBandwidth s;
  s.array_bytes = n * int64_t(sizeof(float));
  s.copy_gbps = 2.0 * double(s.array_bytes) / best_seconds(copy, how) / 1e9;
  s.triad_gbps = 3.0 * double(s.array_bytes) / best_seconds(triad, how) / 1e9;
  return s;
}

std::string describe_stream(const StreamBandwidth& s, int threads) {
  char buf[160];
  const double mib = double(s.array_bytes) / double(1 << 20);
  std::snprintf(buf, sizeof buf,
                "STREAM copy %.1f GB/s, triad %.1f GB/s (3 arrays of %.*f MiB, %d %s)", s.copy_gbps,
                s.triad_gbps, mib < 10 ? 1 : 0, mib, threads, threads == 1 ? "thread" : "threads");
  return buf;
}

}  // namespace moet
