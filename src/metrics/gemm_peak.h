// The machine's measured fp32 GEMM peak: what MFU divides by on the CPU.
#pragma once

namespace moet {

// Best TFLOP/s of 1024³ fp32 GEMMs on the current thread count (at least 12 calls and 0.5 s).
double measure_gemm_peak_tflops();

}  // namespace moet
