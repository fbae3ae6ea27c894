// The machine's measured GEMM peak in a precision: what MFU divides by on the CPU. `moet train`
// measures it at start-up and `moet bench` prints it, with this one function (same shape, same
// best-of, on the thread count set with ops::set_num_threads).
#pragma once
#include <string>

#include "kernels/number_format.h"

namespace moet {

struct GemmPeak {
  double tflops = 0;
  const char* operands = "fp32";  // the operand type the GEMMs of the format use here
  int threads = 0;
  int calls = 0;       // timed calls, of which the fastest counts
  double seconds = 0;  // wall time of the measurement (warm-ups included)
};

// Best TFLOP/s of 1024³ GEMMs on the current thread count (3 warm-ups, then at least 20 calls
// and 1 s), with the operands the GEMMs of `fmt` use here (ops::gemm_operand_dtype(): bf16
// where the CPU multiplies bf16, else fp32).
GemmPeak measure_gemm_peak(ops::Format fmt = ops::Format::F32);

// "bf16 GEMM peak 0.412 TFLOP/s (1024³, best of 48 calls on 2 threads)"
std::string describe_gemm_peak(const GemmPeak& p);

}  // namespace moet
