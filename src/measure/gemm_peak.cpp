#include "measure/gemm_peak.h"

#include "core/arena.h"
#include "kernels/ops.h"
#include "measure/best_of.h"

namespace moet {

double measure_gemm_peak_tflops(ops::Format fmt) {
  constexpr int64_t n = 1024;
  Arena arena(4 * n * n * sizeof(float));
  Tensor c = arena.alloc_f32({n, n}), a32 = arena.alloc_f32({n, n}), b32 = arena.alloc_f32({n, n});
  ops::fill(a32, 0.5);
  ops::fill(b32, 0.25);
  Tensor a = a32, b = b32;
  if (fmt != ops::Format::F32 && ops::gemm_operand_dtype() == DType::BF16) {
    a = arena.alloc(DType::BF16, {n, n});
    b = arena.alloc(DType::BF16, {n, n});
    ops::quantize(a32, ops::Format::BF16, ops::BlockAxis::Rows, a);
    ops::quantize(b32, ops::Format::BF16, ops::BlockAxis::Rows, b);
  }
  // Best of the calls after two warm-ups, over at least 10 calls and 0.5 s, so a start-up hiccup
  // (cold threads, a busy neighbour) does not lower the peak and inflate MFU.
  const double s =
      best_seconds([&] { ops::gemm(a, false, b, true, c); },
                   BestOf{.warmups = 2, .min_calls = 10, .min_seconds = 0.5, .max_calls = 100000});
  return 2.0 * n * n * n / s / 1e12;
}

}  // namespace moet
