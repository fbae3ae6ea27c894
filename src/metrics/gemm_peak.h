// The machine's measured fp32 GEMM peak: what MFU divides by on the CPU.
#pragma once

namespace moet {

// Best TFLOP/s of a few 1024³ fp32 GEMMs on the current thread count (about 0.2 s).
double measure_gemm_peak_tflops();

}  // namespace moet
