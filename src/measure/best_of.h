// How moet times code on a shared machine: the best of repeated calls. A neighbour only ever
// slows a call down, so the fastest call is the machine's own speed. Used by the GEMM peak that
// MFU divides by and by `moet bench`'s calibration of the local system.
#pragma once
#include <functional>

namespace moet {

struct BestOf {
  int warmups = 1;           // untimed calls first (cold threads, page faults)
  int min_calls = 5;         // timed calls at least ...
  double min_seconds = 0.1;  // ... and at least this much time in timed calls ...
  int max_calls = 30;        // ... but no more calls than this
  bool cold_caches = false;  // evict the caches before each timed call
};

// The best (shortest) seconds of one call of `fn`.
double best_seconds(const std::function<void()>& fn, const BestOf& how = {});

// Evicts the CPU caches (writes 96 MiB).
void flush_caches();

}  // namespace moet
