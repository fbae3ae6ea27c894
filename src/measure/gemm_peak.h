// The machine's measured GEMM peak in a precision: what MFU divides by on the CPU. `moet train`
// measures it at start-up and `moet bench` prints it, with this one function (same shape, same
// best-of, on the thread count set with ops::set_num_threads).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "kernels/number_format.h"

namespace moet {

struct GemmPeak {
  double tflops = 0;
  const char* operands = "fp32";  // the operand type the GEMMs of the format use here
  int threads = 0;
  int calls = 0;        // timed calls, of which the fastest counts
  double seconds = 0;   // wall time of the measurement (warm-ups included)
  bool cached = false;  // an earlier run's (moet's cache, speed_cache.h) was the faster
};

// Best TFLOP/s of 1024³ GEMMs on the current thread count (3 warm-ups, then at least 20 calls
// and 1 s), with the operands the GEMMs of `fmt` use here (ops::gemm_operand_dtype(): bf16
// where the CPU multiplies bf16, else fp32).
GemmPeak measure_gemm_peak(ops::Format fmt = ops::Format::F32);

// The peak of GEMMs with `operands` (F32: sgemm; BF16: bf16 GEMMs) as a run takes it: a glance
// of a tenth of a second, and the best of it and every earlier measurement on this CPU, library
// and thread count (moet's cache, which then keeps the best). A busy moment at one run's start
// lowers only that glance, never the peak MFU divides by.
GemmPeak gemm_peak(DType operands);
// The cached best peak alone (nullopt: none measured yet).
std::optional<GemmPeak> cached_gemm_peak(DType operands);

// "bf16 GEMM peak 0.412 TFLOP/s (1024³, best of 48 calls on 2 threads)"
std::string describe_gemm_peak(const GemmPeak& p);

// A run's GEMM peaks: fp32's always, bf16's where the CPU has bf16 GEMMs, and the one MFU divides
// by — the recipe's own (the convention), or --peak-tflops.
struct GemmPeaks {
  GemmPeak fp32, bf16;            // tflops 0: not measured (bf16: no bf16 GEMMs; --peak-tflops)
  bool recipe_uses_bf16 = false;  // the recipe's main GEMMs run on bf16 operands
  double mfu = 0;                 // what MFU divides by
  // {"fp32", "bf16" (null: none), "best", "mfu_divides_by"} for run.json (the report shows them)
  nlohmann::json json() const;
  // "GEMM peaks: fp32 0.401, bf16 0.891 TFLOP/s (1024^3, best of 187 and 145 calls on 2 threads);
  // MFU divides by the bf16 one (the recipe's)"
  std::string describe() const;
};

}  // namespace moet
