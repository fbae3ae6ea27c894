// OpenBLAS vs oneDNN fp32 GEMM on the shapes of configs/small.json (docs/kernels.md).
// usage: build/bench_gemm_libraries [threads] [rounds]; prints GFLOP/s, median of the rounds,
// both libraries alternating in the same process.
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  int M, N, K;
};

double time_once(bool onednn, const Shape& s, const float* A, const float* B, float* C) {
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  auto t0 = std::chrono::steady_clock::now();
  if (onednn)
    dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.0f, A, lda, B, ldb, 0.0f, C,
               s.N);
  else
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                s.M, s.N, s.K, 1.0f, A, lda, B, ldb, 0.0f, C, s.N);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const Shape shapes[] = {
      {"dense fwd [2048,384]x[1024,384]^T", false, true, 2048, 1024, 384},
      {"dense dx [2048,1024]x[1024,384]", false, false, 2048, 384, 1024},
      {"dense dw [2048,1024]^T x[2048,384]", true, false, 1024, 384, 2048},
      {"expert gate/up [256,384]x[512,384]^T", false, true, 256, 512, 384},
      {"expert down [256,256]x[384,256]^T", false, true, 256, 384, 256},
      {"expert dw [256,512]^T x[256,384]", true, false, 512, 384, 256},
      {"router [2048,384]x[32,384]^T", false, true, 2048, 32, 384},
      {"lm_head [2048,384]x[257,384]^T", false, true, 2048, 257, 384},
      {"square 2048^3", false, false, 2048, 2048, 2048},
  };
  std::vector<float> A(2048 * 2048, 0.5f), B(2048 * 2048, 0.25f), C(2048 * 2048);
  std::printf("| GEMM | OpenBLAS GFLOP/s | oneDNN GFLOP/s |\n|---|---|---|\n");
  for (const Shape& s : shapes) {
    std::vector<double> t[2];
    for (int r = 0; r < rounds + 1; ++r)
      for (int lib = 0; lib < 2; ++lib) {
        double sec = time_once(lib == 1, s, A.data(), B.data(), C.data());
        if (r > 0) t[lib].push_back(sec);
      }
    double gf[2];
    for (int lib = 0; lib < 2; ++lib) {
      std::sort(t[lib].begin(), t[lib].end());
      gf[lib] = 2.0 * s.M * s.N * s.K / t[lib][t[lib].size() / 2] / 1e9;
    }
    std::printf("| %s | %.0f | %.0f |\n", s.name, gf[0], gf[1]);
  }
  return 0;
}
