// The FP4 operands' quantization speed (docs/benchmarks.md): ops::quantize_fp4 in each role the
// recipes use — fprop's x (1×16, nearest), dgrad's dy (1×16, stochastic), wgrad's operands (16×1
// after the transform, stochastic or nearest), weights (16×16) — and MXFP4 rows, against
// ops::quantize's MXFP8 rows and bf16 on the same array in one process.
// usage: build/bench_fp4_quantize [rows] [cols] [threads] [rounds]; GB/s = bytes read + written.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "best_of.h"
#include "core/rng.h"
#include "kernels/ops.h"

using moet::bench::best_of;

int main(int argc, char** argv) {
  using namespace moet;
  using ops::BlockAxis;
  using ops::Format;
  const int64_t R = argc > 1 ? std::atoll(argv[1]) : 2048,
                C = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2, rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  ops::set_num_threads(threads);
  std::vector<float> x(size_t(R * C));
  const CounterRng g(1, 0);
  for (int64_t i = 0; i < R * C; ++i) x[size_t(i)] = float(g.normal(uint64_t(i)));
  std::vector<uint16_t> q(size_t(R * C));
  const Tensor xt(x.data(), DType::F32, {R, C}), qt(q.data(), DType::BF16, {R, C});
  const double bytes = double(R * C) * (4 + 2);
  auto row = [&](const char* name, double s) {
    std::printf("| %s | %.2f | %.1f |\n", name, s * 1e3, bytes / s * 1e-9);
  };
  std::printf("%lld x %lld, %d threads, best of %d\n\n| quantizer | ms | GB/s |\n|---|---|---|\n",
              (long long)R, (long long)C, threads, rounds);
  Tensor qm = qt;
  row("bf16", best_of(rounds, [&] { ops::quantize(xt, Format::BF16, BlockAxis::Rows, qm); }));
  row("mxfp8 rows",
      best_of(rounds, [&] { ops::quantize(xt, Format::MXFP8, BlockAxis::Rows, qm); }));
  row("mxfp8 cols",
      best_of(rounds, [&] { ops::quantize(xt, Format::MXFP8, BlockAxis::Cols, qm); }));
  auto fp4 = [&](const char* name, Format f, BlockAxis a, bool sr, bool rht) {
    ops::Fp4Options o;
    o.stochastic = sr;
    o.hadamard = rht;
    o.seed = 5;
    row(name, best_of(rounds, [&] { ops::quantize_fp4(xt, f, a, {qt, {}, {}}, o); }));
  };
  fp4("nvfp4 rows (fprop x)", Format::NVFP4, BlockAxis::Rows, false, false);
  fp4("nvfp4 rows, stochastic (dgrad dy)", Format::NVFP4, BlockAxis::Rows, true, false);
  fp4("nvfp4 cols + RHT (wgrad x)", Format::NVFP4, BlockAxis::Cols, false, true);
  fp4("nvfp4 cols + RHT, stochastic (wgrad dy)", Format::NVFP4, BlockAxis::Cols, true, true);
  fp4("nvfp4 16x16 (weights)", Format::NVFP4, BlockAxis::Square, false, false);
  fp4("mxfp4 rows", Format::MXFP4, BlockAxis::Rows, false, false);
  return 0;
}
