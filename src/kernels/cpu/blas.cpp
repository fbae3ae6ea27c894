// blas.cpp — GEMM backends behind blas.h: oneDNN sgemm for F32, OpenBLAS dgemm for F64.
#include "kernels/cpu/blas.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <atomic>
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

// Thread-invariant GEMMs (ops::set_thread_invariant). A library's sgemm splits its work over
// the threads it is given, and with few output tiles and a long reduction it splits K too: the
// partial sums then meet in an order set by the thread count (the difference --deterministic
// saw between 1 and 2 threads). Here the output is cut into tiles fixed by M and N alone, each
// tile multiplied whole along K by a library call that runs on one thread, the tiles spread over
// the threads: an element's sum is the same call's on any thread count.
std::atomic<bool> g_thread_invariant{false};
constexpr int64_t kTileM = 128, kTileN = 256;

// The library call `gemm(m0, rows, n0, cols)` of each tile of C[M, N]. Inside another op's
// parallel loop the call is that loop's thread's alone (the libraries run on the calling thread
// inside an active parallel region; the thread count of this task is set to 1 for a region of
// one thread, whose nested calls could otherwise start their own threads).
template <typename Fn>
void tiled(int64_t M, int64_t N, Fn&& gemm) {
  auto one_thread = [](auto&& call) {
    if (omp_in_parallel()) return call();
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    call();
    omp_set_num_threads(saved);
  };
  if (omp_get_level() > 0) return one_thread([&] { gemm(int64_t{0}, M, int64_t{0}, N); });
  const int64_t tm = (M + kTileM - 1) / kTileM, tn = (N + kTileN - 1) / kTileN, tiles = tm * tn;
  const int threads = int(std::min<int64_t>(tiles, omp_get_max_threads()));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t m0 = (t / tn) * kTileM, n0 = (t % tn) * kTileN;
    one_thread([&] { gemm(m0, std::min(kTileM, M - m0), n0, std::min(kTileN, N - n0)); });
  }
}

// Row-major element offsets of op(A)'s row m0 and op(B)'s column n0 as stored.
inline int64_t a_at(bool trans_a, int64_t m0, int64_t lda) { return trans_a ? m0 : m0 * lda; }
inline int64_t b_at(bool trans_b, int64_t n0, int64_t ldb) { return trans_b ? n0 * ldb : n0; }

// One oneDNN GEMM (`lib`: dnnl_sgemm or dnnl_gemm_bf16bf16f32, `name` for errors): as one call,
// or under thread-invariance tile by tile.
template <typename T, typename Lib>
void dnnl_gemm(Lib lib, const char* name, bool trans_a, bool trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, const T* A, int64_t lda, const T* B, int64_t ldb, float beta,
               float* C, int64_t ldc) {
  auto call = [&](int64_t m0, int64_t m, int64_t n0, int64_t n) {
    const dnnl_status_t st =
        lib(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, K, alpha, A + a_at(trans_a, m0, lda),
            lda, B + b_at(trans_b, n0, ldb), ldb, beta, C + m0 * ldc + n0, ldc);
    MOET_CHECK(st == dnnl_success, name, " failed with status ", int(st), " (M=", m, " N=", n,
               " K=", K, ")");
  };
  if (g_thread_invariant.load(std::memory_order_relaxed)) return tiled(M, N, call);
  call(0, M, 0, N);
}

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
  if (avx2_only && !g_thread_invariant.load(std::memory_order_relaxed) && trans_a && !trans_b &&
      K <= kSmallTransposedK && M <= INT_MAX && N <= INT_MAX) {
    // Aᵀ·B over a short reduction (the experts' weight gradients over their few hundred rows,
    // attention's dV and dK over a query tile): on AVX2-only CPUs OpenBLAS runs it 1.3x faster
    // than oneDNN's sgemm; with AVX-512 oneDNN is the faster one (bench/gemm_libraries.sh,
    // docs/kernels.md "BLAS choice"). Fixed per CPU, so results do not depend on timing. Not
    // under thread-invariance: OpenBLAS threads itself.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(M), int(N), int(K), alpha, A, int(lda),
                B, int(ldb), beta, C, int(ldc));
    return;
  }
  dnnl_gemm(dnnl_sgemm, "dnnl_sgemm", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
            ldc);
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
  dnnl_gemm(dnnl_gemm_bf16bf16f32, "dnnl_gemm_bf16bf16f32", trans_a, trans_b, M, N, K, alpha, A,
            lda, B, ldb, beta, C, ldc);
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

namespace moet::ops {
void set_thread_invariant(bool on) { cpu::g_thread_invariant.store(on); }
bool thread_invariant() { return cpu::g_thread_invariant.load(); }
}  // namespace moet::ops
