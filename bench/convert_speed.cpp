// fp32 -> bf16 conversion speed (docs/benchmarks.md): kernels/cpu/convert.h against the loop
// quantize ran before it and against core/bf16.h's scalar definition in a loop the compiler
// vectorises as it can, on the same arrays in one process; and the FP8 block quantizers.
// usage: build/bench_convert_speed [threads] [rounds]; GB/s counted as bytes read + written.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "best_of.h"
#include "core/bf16.h"
#include "kernels/cpu/convert.h"
#include "kernels/ops.h"

namespace {

// The scalar definition over [0, n), the threads splitting it as the ops do, vectorised by the
// compiler as well as it can.
void scalar_to_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = moet::bf16_bits(x[i]);
}

// What quantize's bf16 path ran before convert.h: the value rounded, then its bits taken.
void before_to_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = moet::bf16_bits(moet::round_bf16(x[i]));
}

void vector_to_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t b = n * t / T, e = n * (t + 1) / T;
    moet::ops::cpu::f32_to_bf16(x + b, y + b, e - b);
  }
}

}  // namespace

using moet::bench::best_of;

int main(int argc, char** argv) {
  using namespace moet;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2,
            rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  ops::set_num_threads(threads);
  std::printf("conversions: %s, %d threads; GB/s (read + written), best of %d\n\n",
              ops::cpu::convert_isa(), threads, rounds);
  std::printf(
      "| elements | fp32->bf16 before | scalar definition, compiler-vectorised | "
      "convert.h | convert.h / before | MXFP8 rows | MXFP8 cols |\n"
      "|---|---|---|---|---|---|---|\n");
  for (int64_t n : {int64_t(1) << 16, int64_t(1) << 20, int64_t(1) << 24}) {
    std::vector<float> x(static_cast<size_t>(n)), q(static_cast<size_t>(n));
    std::vector<uint16_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 1000) * 1e-3f - 0.3f;
    const double t_before = best_of(rounds, [&] { before_to_bf16(x.data(), y.data(), n); });
    const double t_scalar = best_of(rounds, [&] { scalar_to_bf16(x.data(), y.data(), n); });
    const double t_vector = best_of(rounds, [&] { vector_to_bf16(x.data(), y.data(), n); });
    Tensor xt(x.data(), DType::F32, {n / 256, 256}), qt(q.data(), DType::F32, {n / 256, 256});
    const double t_rows =
        best_of(rounds, [&] { ops::quantize(xt, ops::Format::MXFP8, ops::BlockAxis::Rows, qt); });
    const double t_cols =
        best_of(rounds, [&] { ops::quantize(xt, ops::Format::MXFP8, ops::BlockAxis::Cols, qt); });
    const double b16 = 6.0 * double(n), b8 = 8.0 * double(n);
    std::printf("| %lld | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f |\n", (long long)n,
                b16 / t_before / 1e9, b16 / t_scalar / 1e9, b16 / t_vector / 1e9,
                t_before / t_vector, b8 / t_rows / 1e9, b8 / t_cols / 1e9);
  }
  return 0;
}
