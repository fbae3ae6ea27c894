// GEMM libraries at the model's own shapes (docs/kernels.md, "BLAS choice"): one binary per
// library, built by bench/gemm_libraries.sh, which runs them in turn and tabulates.
// usage: gemm_libraries THREADS ROUNDS [TOKENS]; prints "shape<TAB>variant<TAB>GFLOP/s" lines.
// The library comes from the build: MOET_GEMM_OPENBLAS (cblas_sgemm), MOET_GEMM_DNNL (dnnl_sgemm
// and dnnl_gemm_bf16bf16f32, oneDNN 2.x or 3.x by the include path), MOET_GEMM_MKL (cblas_sgemm,
// cblas_gemm_bf16bf16f32, each also with the weight pre-packed once), MOET_GEMM_LIBXSMM
// (libxsmm_sgemm, header-only). A bf16 variant the CPU cannot run is left out.
// Dense GEMMs run on all threads; expert GEMMs as moet runs them: one per thread at a time, each
// single-threaded, the threads busy with different experts.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#if defined(MOET_GEMM_OPENBLAS)
#include <cblas.h>
#elif defined(MOET_GEMM_DNNL)
#include <dnnl.h>
#elif defined(MOET_GEMM_MKL)
#include <mkl.h>
#elif defined(MOET_GEMM_LIBXSMM)
#define LIBXSMM_DEFAULT_CONFIG
#include <libxsmm_source.h>
#endif

namespace {

#if defined(MOET_GEMM_DNNL)
// Exported by libdnnl 2.6 and 3.2 beside dnnl_sgemm, not declared in their headers.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha, const uint16_t* A,
                                               dnnl_dim_t lda, const uint16_t* B, dnnl_dim_t ldb,
                                               float beta, float* C, dnnl_dim_t ldc);
#endif

struct Shape {
  std::string name;
  bool ta, tb;
  int M, N, K;
  bool expert;  // single-threaded, one per thread
};

// One way of running a shape's GEMM: prepare(s) (untimed: pack weights, convert operands), then
// run(s, t) on operand set t (each thread of the expert runs has its own). Returns false where the
// library cannot (no bf16 GEMM on this CPU).
struct Variant {
  std::string name;
  std::function<bool(const Shape&)> prepare;
  std::function<void(const Shape&, int)> run;
};

// Row-major C[M,N] = op(A)·op(B).
void sgemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float* C, int ldc) {
#if defined(MOET_GEMM_OPENBLAS) || defined(MOET_GEMM_MKL)
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
#elif defined(MOET_GEMM_DNNL)
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
#elif defined(MOET_GEMM_LIBXSMM)
  // column-major: Cᵀ = op(B)ᵀ·op(A)ᵀ
  const char tra = tb ? 'T' : 'N', trb = ta ? 'T' : 'N';
  const float alpha = 1.0f, beta = 0.0f;
  libxsmm_sgemm(&tra, &trb, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
#endif
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  const int N = argc > 3 ? std::atoi(argv[3]) : 1024;  // tokens of a micro-batch
  omp_set_num_threads(threads);
#if defined(MOET_GEMM_OPENBLAS)
  openblas_set_num_threads(threads);
#elif defined(MOET_GEMM_MKL)
  mkl_set_num_threads(threads);
#elif defined(MOET_GEMM_LIBXSMM)
  libxsmm_init();
#endif
  // configs/bench-dsv3.json: hidden 384, dense FFN 1536, experts 48 x 256 top-6 (N·6/48 rows
  // each on average), 16k vocabulary
  const int E = N * 6 / 48;
  const std::vector<Shape> shapes = {
      {"dense fprop [N,384]x[1536,384]^T", false, true, N, 1536, 384, false},
      {"dense dgrad [N,1536]x[1536,384]", false, false, N, 384, 1536, false},
      {"dense wgrad [N,1536]^T x[N,384]", true, false, 1536, 384, N, false},
      {"lm_head fprop [N,384]x[16384,384]^T", false, true, N, 16384, 384, false},
      {"expert gate/up fprop [E,384]x[512,384]^T", false, true, E, 512, 384, true},
      {"expert down fprop [E,256]x[384,256]^T", false, true, E, 384, 256, true},
      {"expert gate/up dgrad [E,512]x[512,384]", false, false, E, 384, 512, true},
      {"expert gate/up wgrad [E,512]^T x[E,384]", true, false, 512, 384, E, true},
  };
  const size_t big = size_t(16384) * 2048;
  // two operand sets (the expert runs' threads use different ones), fp32 and bf16 (1.0 and 0.5)
  std::vector<float> A[2], B[2], C[2];
  std::vector<uint16_t> Ab[2], Bb[2];
  for (int t = 0; t < 2; ++t) {
    A[t].assign(big, 0.5f), B[t].assign(big, 0.25f), C[t].assign(big, 0.0f);
    Ab[t].assign(big, 0x3F80), Bb[t].assign(big, 0x3F00);
  }
  auto ld = [](const Shape& s, bool b) { return b ? (s.tb ? s.K : s.N) : (s.ta ? s.M : s.K); };
  std::vector<Variant> variants;
  variants.push_back({"fp32", [](const Shape&) { return true; },
                      [&](const Shape& s, int t) {
                        sgemm(s.ta, s.tb, s.M, s.N, s.K, A[t].data(), ld(s, false), B[t].data(),
                              ld(s, true), C[t].data(), s.N);
                      }});
#if defined(MOET_GEMM_DNNL)
  variants.push_back({"bf16",
                      [&](const Shape& s) {
                        return dnnl_gemm_bf16bf16f32(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N,
                                                     s.K, 1.0f, Ab[0].data(), ld(s, false),
                                                     Bb[0].data(), ld(s, true), 0.0f, C[0].data(),
                                                     s.N) == dnnl_success;
                      },
                      [&](const Shape& s, int t) {
                        dnnl_gemm_bf16bf16f32(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K,
                                              1.0f, Ab[t].data(), ld(s, false), Bb[t].data(),
                                              ld(s, true), 0.0f, C[t].data(), s.N);
                      }});
#elif defined(MOET_GEMM_MKL)
  // the weight (B) packed once, as moet would once per optimizer step
  struct Packs {
    void* p[2] = {nullptr, nullptr};
    ~Packs() {
      for (void* q : p) mkl_free(q);
    }
  };
  auto packed_f32 = std::make_shared<Packs>(), packed_bf16 = std::make_shared<Packs>();
  variants.push_back(
      {"fp32, weight packed",
       [&, packed_f32](const Shape& s) {
         for (int t = 0; t < 2; ++t) {
           mkl_free(packed_f32->p[t]);
           packed_f32->p[t] =
               mkl_malloc(cblas_sgemm_pack_get_size(CblasBMatrix, s.M, s.N, s.K), 64);
           cblas_sgemm_pack(CblasRowMajor, CblasBMatrix, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N,
                            s.K, 1.0f, B[t].data(), ld(s, true),
                            static_cast<float*>(packed_f32->p[t]));
         }
         return true;
       },
       [&, packed_f32](const Shape& s, int t) {
         cblas_sgemm_compute(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, CblasPacked, s.M, s.N,
                             s.K, A[t].data(), ld(s, false), static_cast<float*>(packed_f32->p[t]),
                             0, 0.0f, C[t].data(), s.N);
       }});
  variants.push_back(
      {"bf16", [](const Shape&) { return true; },
       [&](const Shape& s, int t) {
         cblas_gemm_bf16bf16f32(
             CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M,
             s.N, s.K, 1.0f, reinterpret_cast<const MKL_BF16*>(Ab[t].data()), ld(s, false),
             reinterpret_cast<const MKL_BF16*>(Bb[t].data()), ld(s, true), 0.0f, C[t].data(), s.N);
       }});
  variants.push_back(
      {"bf16, weight packed",
       [&, packed_bf16](const Shape& s) {
         for (int t = 0; t < 2; ++t) {
           mkl_free(packed_bf16->p[t]);
           packed_bf16->p[t] =
               mkl_malloc(cblas_gemm_bf16bf16f32_pack_get_size(CblasBMatrix, s.M, s.N, s.K), 64);
           cblas_gemm_bf16bf16f32_pack(CblasRowMajor, CblasBMatrix,
                                       s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K,
                                       reinterpret_cast<const MKL_BF16*>(Bb[t].data()), ld(s, true),
                                       static_cast<MKL_BF16*>(packed_bf16->p[t]));
         }
         return true;
       },
       [&, packed_bf16](const Shape& s, int t) {
         cblas_gemm_bf16bf16f32_compute(
             CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, CblasPacked, s.M, s.N, s.K, 1.0f,
             reinterpret_cast<const MKL_BF16*>(Ab[t].data()), ld(s, false),
             static_cast<const MKL_BF16*>(packed_bf16->p[t]), 0, 0.0f, C[t].data(), s.N);
       }});
#endif
  for (const Shape& s : shapes)
    for (const Variant& v : variants) {
      if (!v.prepare(s)) continue;
      // experts: 8 GEMMs per thread, the threads in parallel (as moet's grouped GEMM)
      const int reps = s.expert ? 8 : 1;
      std::vector<double> t;
      for (int r = 0; r <= rounds; ++r) {
        const double t0 = now();
        if (s.expert) {
#if defined(MOET_GEMM_MKL)
          const int inner = mkl_set_num_threads_local(1);
#endif
#pragma omp parallel num_threads(threads)
          for (int i = 0; i < reps; ++i) v.run(s, omp_get_thread_num() % 2);
#if defined(MOET_GEMM_MKL)
          mkl_set_num_threads_local(inner);
#endif
        } else {
          v.run(s, 0);
        }
        if (r > 0) t.push_back(now() - t0);
      }
      std::sort(t.begin(), t.end());
      const double flops = 2.0 * s.M * s.N * s.K * (s.expert ? reps * threads : 1);
      std::printf("%s\t%s\t%.1f\n", s.name.c_str(), v.name.c_str(), flops / t[t.size() / 2] / 1e9);
    }
  return 0;
}
