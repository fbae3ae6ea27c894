// What --deterministic's thread-invariant GEMMs cost (docs/benchmarks.md): the GEMMs of one
// sequence through a model's linear layers (fprop, dgrad, wgrad of the MLA projections, the dense
// MLP, a routed expert's share and the LM head, read from a config), timed with oneDNN threading
// them itself and cut into thread-independent tiles (ops::set_thread_invariant), alternating
// A B A B in one process; and whether the two give the same bits.
// usage: build/bench_thread_invariant_gemm CONFIG.json [threads] [seq] [rounds]
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/arena.h"
#include "kernels/ops.h"
#include "model/config.h"

namespace {

struct Gemm {
  moet::Tensor a, b, c;
  bool ta, tb;
};

double seconds_of(std::vector<Gemm>& gemms) {
  const auto t0 = std::chrono::steady_clock::now();
  for (Gemm& g : gemms) moet::ops::gemm(g.a, g.ta, g.b, g.tb, g.c);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG.json [threads] [seq] [rounds]\n", argv[0]);
    return 2;
  }
  const moet::ModelConfig cfg = moet::load_model_config(argv[1]);
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int64_t T = argc > 3 ? std::atoll(argv[3]) : 256;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 20;
  moet::ops::set_num_threads(threads);
  const int64_t D = cfg.hidden_size, H = cfg.num_attention_heads;
  const int64_t qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
  const int64_t expert_rows = std::max<int64_t>(
      1, T * cfg.num_experts_per_tok / std::max<int64_t>(1, cfg.n_routed_experts));
  // (rows, out, in) of each linear layer one sequence runs through
  const std::vector<std::array<int64_t, 3>> linears = {
      {T, cfg.q_lora_rank, D},
      {T, H * qk, cfg.q_lora_rank},
      {T, cfg.kv_lora_rank + cfg.qk_rope_head_dim, D},
      {T, H * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank},
      {T, D, H * cfg.v_head_dim},
      {T, 2 * cfg.intermediate_size, D},
      {T, D, cfg.intermediate_size},
      {expert_rows, 2 * cfg.moe_intermediate_size, D},
      {expert_rows, D, cfg.moe_intermediate_size},
      {T, cfg.vocab_size, D}};
  int64_t floats = 0;
  for (const auto& l : linears) floats += 3 * (l[0] * l[2] + l[1] * l[2] + l[0] * l[1]);
  moet::Arena arena(size_t(floats) * sizeof(float) + 64 * 64 * linears.size());
  std::vector<Gemm> gemms;
  double flop = 0;
  for (const auto& l : linears) {
    const int64_t N = l[0], O = l[1], I = l[2];
    moet::Tensor x = arena.alloc_f32({N, I}), w = arena.alloc_f32({O, I}),
                 y = arena.alloc_f32({N, O}), dy = arena.alloc_f32({N, O}),
                 dx = arena.alloc_f32({N, I}), dw = arena.alloc_f32({O, I});
    for (moet::Tensor* t : {&x, &w, &dy}) {
      float* p = t->f32();
      for (int64_t i = 0; i < t->numel(); ++i) p[i] = float((i * 7919 % 1000) - 500) * 1e-3f;
    }
    gemms.push_back({x, w, y, false, true});     // fprop: y = x wᵀ
    gemms.push_back({dy, w, dx, false, false});  // dgrad: dx = dy w
    gemms.push_back({dy, x, dw, true, false});   // wgrad: dw = dyᵀ x (K = the tokens)
    flop += 3 * 2.0 * double(N) * double(O) * double(I);
  }
  std::vector<std::vector<float>> library, tiled;
  auto outputs = [&] {
    std::vector<std::vector<float>> o;
    for (const Gemm& g : gemms) o.emplace_back(g.c.f32(), g.c.f32() + g.c.numel());
    return o;
  };
  double best[2] = {1e30, 1e30};
  for (int r = 0; r < rounds + 1; ++r)
    for (int mode = 0; mode < 2; ++mode) {
      moet::ops::set_thread_invariant(mode == 1);
      const double s = seconds_of(gemms);
      if (r > 0) best[mode] = std::min(best[mode], s);  // round 0 warms up
      if (r == 0) (mode ? tiled : library) = outputs();
    }
  int64_t differ = 0, total = 0;
  for (size_t i = 0; i < library.size(); ++i)
    for (size_t j = 0; j < library[i].size(); ++j, ++total)
      differ += std::memcmp(&library[i][j], &tiled[i][j], sizeof(float)) != 0;
  std::printf("%s, %d threads, one sequence of %lld tokens, %zu GEMMs (%.2f GFLOP)\n", argv[1],
              threads, (long long)T, gemms.size(), flop / 1e9);
  std::printf("oneDNN's threading: %.3f ms (%.3f TFLOP/s)\n", best[0] * 1e3, flop / best[0] / 1e12);
  std::printf("thread-invariant tiles: %.3f ms (%.3f TFLOP/s)\n", best[1] * 1e3,
              flop / best[1] / 1e12);
  std::printf("tiles / library: %.3f; outputs differing in bits: %lld of %lld\n", best[1] / best[0],
              (long long)differ, (long long)total);
  return 0;
}
