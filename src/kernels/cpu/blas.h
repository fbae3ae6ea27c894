// blas.h — the one place the CPU kernels call a matrix-product library. Row-major GEMM with
// leading dimensions (so attention can multiply strided per-head slices without copies):
// F32 goes to oneDNN's dnnl_sgemm (faster than OpenBLAS on our shapes, docs/kernels.md), F64 to
// OpenBLAS's cblas_dgemm (oneDNN has no dgemm; F64 only runs in tests).
#pragma once
#include <cstdint>

namespace moet::ops::cpu {

// C[M,N] = alpha * op(A) · op(B) + beta * C; op(A) is [M,K], op(B) is [K,N]; lda/ldb/ldc are the
// row strides of A, B, C as stored. K == 0 gives C = beta * C (C is not read when beta == 0).
void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);
// BF16 operands (bf16 bit patterns), F32 result: oneDNN's gemm_bf16bf16f32 (AMX or AVX512_BF16
// kernels) where the CPU has them; elsewhere (MOET_BF16_OPERANDS=1, gemm_operand_dtype()) the
// operands are widened to fp32 and multiplied by the F32 path — bit for bit its result.
void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc);
void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
               int64_t ldc);

}  // namespace moet::ops::cpu
