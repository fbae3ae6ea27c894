// The machine's copy bandwidth, as STREAM measures it: copy (a = b) and triad (a = b + s·c) over
// float arrays, the best of repeated calls on the thread count set with ops::set_num_threads.
// `moet bench` prints it beside the GEMM peak, and the per-op profile rates each memory-bound op
// against it (docs/benchmarks.md).
#pragma once
#include <cstdint>
#include <string>

namespace moet {

struct StreamBandwidth {
  int64_t array_bytes = 0;  // bytes of each array
  double copy_gbps = 0;     // bytes read + written (STREAM's count: no write-allocate traffic)
  double triad_gbps = 0;
};

// STREAM's rule: each array at least 4× the last-level cache (as sysfs gives it; 64 MiB to 1 GiB),
// so the numbers are the memory's, not a cache's.
int64_t stream_array_bytes();
// Copy and triad over arrays of `array_bytes` each; best of at least 5 calls and 0.2 s.
StreamBandwidth measure_stream(int64_t array_bytes);

// "STREAM copy 24.1 GB/s, triad 26.3 GB/s (3 arrays of 128 MiB, 2 threads)"
std::string describe_stream(const StreamBandwidth& s, int threads);

}  // namespace moet
