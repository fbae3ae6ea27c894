// The machine's measured GEMM peak in a precision: what MFU divides by on the CPU.
#pragma once
#include "kernels/precision.h"

namespace moet {

// Best TFLOP/s of 1024³ GEMMs on the current thread count (at least 12 calls and 0.5 s), with
// the operands the GEMMs of `fmt` use here (ops::gemm_operand_dtype(): bf16 where the CPU
// multiplies bf16, else fp32).
double measure_gemm_peak_tflops(ops::Format fmt = ops::Format::F32);

}  // namespace moet
