#include "measure/gemm_peak.h"

#include <chrono>
#include <cstdio>

#include "core/arena.h"
#include "kernels/ops.h"
#include "measure/best_of.h"

namespace moet {

GemmPeak measure_gemm_peak(ops::Format fmt) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int64_t n = 1024;
  Arena arena(4 * n * n * sizeof(float));
  Tensor c = arena.alloc_f32({n, n}), a32 = arena.alloc_f32({n, n}), b32 = arena.alloc_f32({n, n});
  ops::fill(a32, 0.5);
  ops::fill(b32, 0.25);
  Tensor a = a32, b = b32;
  GemmPeak p;
  if (fmt != ops::Format::F32 && ops::gemm_operand_dtype() == DType::BF16) {
    a = arena.alloc(DType::BF16, {n, n});
    b = arena.alloc(DType::BF16, {n, n});
    ops::quantize(a32, ops::Format::BF16, ops::BlockAxis::Rows, a);
    ops::quantize(b32, ops::Format::BF16, ops::BlockAxis::Rows, b);
    p.operands = "bf16";
  }
  // The best call after warm-ups, over at least 20 calls and 1 s: a neighbour or a start-up
  // hiccup (cold threads, page faults) only slows calls down, so the fastest is the machine's
  // own speed and a busy moment does not lower the peak and inflate MFU.
  const BestOf how{.warmups = 3, .min_calls = 20, .min_seconds = 1.0, .max_calls = 100000};
  int calls = 0;
  const double s = best_seconds(
      [&] {
        ops::gemm(a, false, b, true, c);
        ++calls;
      },
      how);
  p.tflops = 2.0 * n * n * n / s / 1e12;
  p.threads = ops::num_threads();
  p.calls = calls - how.warmups;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

std::string describe_gemm_peak(const GemmPeak& p) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s GEMM peak %.3f TFLOP/s (1024^3, best of %d calls on %d %s)",
                p.operands, p.tflops, p.calls, p.threads, p.threads == 1 ? "thread" : "threads");
  return buf;
}

}  // namespace moet
