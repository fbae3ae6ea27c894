// GEMM libraries at the model's own shapes (docs/kernels.md, "BLAS choice"): one binary per
// library, built by bench/gemm_libraries.sh, which runs them in turn and tabulates.
// usage: gemm_libraries THREADS ROUNDS [TOKENS]; prints one line per shape: "name gflops".
// The library comes from the build: MOET_GEMM_OPENBLAS (cblas_sgemm), MOET_GEMM_DNNL (dnnl_sgemm,
// oneDNN 2.x or 3.x by the include path), MOET_GEMM_MKL (cblas_sgemm, and the weight pre-packed
// once with cblas_sgemm_pack as a second column), MOET_GEMM_LIBXSMM (libxsmm_sgemm, header-only).
// Dense GEMMs run on all threads; expert GEMMs as moet runs them: one per thread at a time, each
// single-threaded, the threads busy with different experts.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

struct Shape {
  std::string name;
  bool ta, tb;
  int M, N, K;
  bool expert;  // single-threaded, one per thread
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

#if defined(MOET_GEMM_MKL)
// The weight operand B (the second) packed once; C = op(A)·packed(B).
struct Packed {
  float* p = nullptr;
  void pack(bool tb, int M, int N, int K, const float* B, int ldb) {
    p = static_cast<float*>(mkl_malloc(cblas_sgemm_pack_get_size(CblasBMatrix, M, N, K), 64));
    cblas_sgemm_pack(CblasRowMajor, CblasBMatrix, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, B,
                     ldb, p);
  }
  void compute(bool ta, int M, int N, int K, const float* A, int lda, float* C, int ldc) const {
    cblas_sgemm_compute(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasPacked, M, N, K, A, lda,
                        p, 0, 0.0f, C, ldc);
  }
  ~Packed() {
    if (p) mkl_free(p);
  }
};
#endif

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
      {"  the same, dy transposed first", true, false, 512, 384, E, true},
  };
  const size_t big = size_t(16384) * 2048;
  std::vector<float> A(big, 0.5f), B(big, 0.25f), C(big);
  std::vector<float> A2(big, 0.5f), B2(big, 0.25f), C2(big);
  for (const Shape& s : shapes) {
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    auto run = [&](bool packed_weight) {
      (void)packed_weight;
#if defined(MOET_GEMM_MKL)
      Packed pk[2];
      if (packed_weight) {
        pk[0].pack(s.tb, s.M, s.N, s.K, B.data(), ldb);
        pk[1].pack(s.tb, s.M, s.N, s.K, B2.data(), ldb);
      }
      auto one = [&](int t) {
        if (packed_weight)
          pk[t].compute(s.ta, s.M, s.N, s.K, t ? A2.data() : A.data(), lda,
                        t ? C2.data() : C.data(), s.N);
        else
          sgemm(s.ta, s.tb, s.M, s.N, s.K, t ? A2.data() : A.data(), lda, t ? B2.data() : B.data(),
                ldb, t ? C2.data() : C.data(), s.N);
      };
#else
      const bool transpose_first = s.name.find("transposed first") != std::string::npos;
      auto one = [&](int t) {
        const float* a = t ? A2.data() : A.data();
        if (transpose_first) {  // op(A) = Aᵀ made explicit: [M, K] from A [K, M]
          static thread_local std::vector<float> at;
          at.resize(size_t(s.M) * s.K);
          for (int k = 0; k < s.K; ++k)
            for (int m = 0; m < s.M; ++m) at[size_t(m) * s.K + k] = a[size_t(k) * s.M + m];
          sgemm(false, s.tb, s.M, s.N, s.K, at.data(), s.K, t ? B2.data() : B.data(), ldb,
                t ? C2.data() : C.data(), s.N);
          return;
        }
        sgemm(s.ta, s.tb, s.M, s.N, s.K, a, lda, t ? B2.data() : B.data(), ldb,
              t ? C2.data() : C.data(), s.N);
      };
#endif
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
          for (int i = 0; i < reps; ++i) one(omp_get_thread_num() % 2);
#if defined(MOET_GEMM_MKL)
          mkl_set_num_threads_local(inner);
#endif
        } else {
          one(0);
        }
        if (r > 0) t.push_back(now() - t0);
      }
      std::sort(t.begin(), t.end());
      const double flops = 2.0 * s.M * s.N * s.K * (s.expert ? reps * threads : 1);
      return flops / t[t.size() / 2] / 1e9;
    };
    std::printf("%s\t%.1f", s.name.c_str(), run(false));
#if defined(MOET_GEMM_MKL)
    std::printf("\t%.1f", run(true));
#endif
    std::printf("\n");
  }
  return 0;
}
