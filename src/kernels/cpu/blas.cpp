// blas.cpp — GEMM backends behind blas.h: oneDNN sgemm for F32, OpenBLAS dgemm for F64.
#include "kernels/cpu/blas.h"

#include <cblas.h>
#include <dnnl.h>

#include <climits>

#include "core/error.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu/convert.h"
#include "kernels/ops.h"

// Exported by libdnnl (the BLAS-like bf16 entry next to dnnl_sgemm) but not declared in its
// public headers; row-major like dnnl_sgemm. bfloat16_t is a 16-bit bit pattern.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha, const uint16_t* A,
                                               dnnl_dim_t lda, const uint16_t* B, dnnl_dim_t ldb,
                                               float beta, float* C, dnnl_dim_t ldc);

namespace moet::ops::cpu {
namespace {

// Reductions up to this long with a transposed A go to OpenBLAS (see blas_gemm).
constexpr int64_t kSmallTransposedK = 256;

// K == 0: the product is empty, C = beta * C (BLAS semantics; oneDNN would leave C untouched).
template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

}  // namespace

void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  static const bool avx2_only = !cpu_has_avx512();
  if (avx2_only && trans_a && !trans_b && K <= kSmallTransposedK && M <= INT_MAX && N <= INT_MAX) {
    // Aᵀ·B over a short reduction (the experts' weight gradients over their few hundred rows,
    // attention's dV and dK over a query tile): on AVX2-only CPUs OpenBLAS runs it 1.3x faster
    // than oneDNN's sgemm; with AVX-512 oneDNN is the faster one (bench/gemm_libraries.sh,
    // docs/kernels.md "BLAS choice"). Fixed per CPU, so results do not depend on timing.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(M), int(N), int(K), alpha, A, int(lda),
                B, int(ldb), beta, C, int(ldc));
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                      lda, B, ldb, beta, C, ldc);
  MOET_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", int(st), " (M=", M, " N=", N,
             " K=", K, ")");
}

void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  if (!bf16_gemm_native()) {
    // bf16 operands without bf16 instructions (MOET_BF16_OPERANDS=1): the operands widened to
    // fp32 (exact) and multiplied by sgemm, so the bf16 storage paths run on every CPU
    const int64_t ra = trans_a ? K : M, ca = trans_a ? M : K, rb = trans_b ? N : K,
                  cb = trans_b ? K : N;
    float* a = scratch<float>(size_t(ra * ca), 8);
    float* b = scratch<float>(size_t(rb * cb), 9);
    for (int64_t i = 0; i < ra; ++i) bf16_to_f32(A + i * lda, a + i * ca, ca);
    for (int64_t i = 0; i < rb; ++i) bf16_to_f32(B + i * ldb, b + i * cb, cb);
    return blas_gemm(trans_a, trans_b, M, N, K, alpha, a, ca, b, cb, beta, C, ldc);
  }
  const dnnl_status_t st = dnnl_gemm_bf16bf16f32(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K,
                                                 alpha, A, lda, B, ldb, beta, C, ldc);
  MOET_CHECK(st == dnnl_success, "dnnl_gemm_bf16bf16f32 failed with status ", int(st), " (M=", M,
             " N=", N, " K=", K, ")");
}

void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
               int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  for (int64_t d : {M, N, K, lda, ldb, ldc})
    MOET_CHECK(d <= INT_MAX, "cblas_dgemm dimension ", d, " exceeds the 32-bit BLAS interface");
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), alpha, A, int(lda), B,
              int(ldb), beta, C, int(ldc));
}

}  // namespace moet::ops::cpu
