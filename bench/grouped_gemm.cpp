// bench_grouped_gemm — moet's grouped expert GEMM against a dense GEMM of equal FLOPs, at the
// shapes of a config's MoE layer (docs/benchmarks.md): per-expert row counts from seeded
// group-limited top-k routing of N tokens (uneven, as training sees them), the gate/up and down
// projections, forward, input gradient and weight gradient, in a precision.
//
// usage: bench_grouped_gemm [CONFIG.json] [TOKENS] [fp32|bf16|mxfp8|fp8-blockwise] [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "best_of.h"
#include "core/arena.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/recipe.h"

using namespace moet;

namespace {

// fn's fastest of `rounds` runs
double seconds(const std::function<void()>& fn, int rounds) { return bench::best_of(rounds, fn); }

}  // namespace

int main(int argc, char** argv) {
  const std::string cfg_path =
      argc > 1 ? argv[1] : std::string(MOET_SOURCE_DIR) + "/configs/small.json";
  const int64_t N = argc > 2 ? std::atoll(argv[2]) : 1024;
  const std::string precision = argc > 3 ? argv[3] : "fp32";
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 7;
  const ModelConfig c = load_model_config(cfg_path);
  const ops::Format f = resolve_precision(precision, 0).decoder(1, c.num_hidden_layers).fprop;
  const ops::LinearPrecision p = ops::LinearPrecision::all(f);
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok, D = c.hidden_size,
                F = c.moe_intermediate_size, M = N * K;
  // routing: sigmoid scores of random logits through the real router (group-limited top-k)
  std::mt19937 g(7);
  std::normal_distribution<float> nd;
  std::vector<float> logits(N * E), bias(E, 0.0f), scores(N * E), gates(N * K);
  std::vector<int32_t> idx(N * K), off(E + 1), slot(N * K), token(M);
  for (float& v : logits) v = nd(g);
  ops::RouterSpec rs{E, c.n_group, c.topk_group, K, c.norm_topk_prob, c.routed_scaling_factor};
  Tensor lt(logits.data(), DType::F32, {N, E}), bt(bias.data(), DType::F32, {E});
  Tensor st(scores.data(), DType::F32, {N, E}), it(idx.data(), DType::I32, {N, K});
  Tensor gt(gates.data(), DType::F32, {N, K}), ot(off.data(), DType::I32, {E + 1});
  Tensor slt(slot.data(), DType::I32, {N, K}), tt(token.data(), DType::I32, {M});
  ops::router_forward(lt, bt, rs, st, it, gt);
  ops::moe_permute_plan(it, E, ot, slt, tt);
  int64_t lo = M, hi = 0;
  for (int64_t e = 0; e < E; ++e)
    lo = std::min<int64_t>(lo, off[e + 1] - off[e]),
    hi = std::max<int64_t>(hi, off[e + 1] - off[e]);
  Arena a(size_t(4) * (M * 2 * F * 4 + E * 3 * F * D * 5 + M * D * 4) + (64 << 20));
  Tensor x = a.alloc_f32({M, D}), gu = a.alloc_f32({M, 2 * F}), h = a.alloc_f32({M, F});
  Tensor y = a.alloc_f32({M, D}), dx = a.alloc_f32({M, D}), dgu = a.alloc_f32({M, 2 * F});
  Tensor dh = a.alloc_f32({M, F});
  Tensor w1 = a.alloc_f32({E, 2 * F, D}), w2 = a.alloc_f32({E, D, F});
  Tensor dw1 = a.alloc_f32({E, 2 * F, D}), dw2 = a.alloc_f32({E, D, F});
  Tensor dense_w1 = a.alloc_f32({2 * F, D}), dense_w2 = a.alloc_f32({D, F});
  for (Tensor* t : {&x, &h, &dgu, &y, &w1, &w2, &dense_w1, &dense_w2}) ops::fill(*t, 0.01);
  ops::fill(dw1, 0), ops::fill(dw2, 0);
  Tensor dwd1 = dw1.view({E * 2 * F, D}).rows(0, 2 * F), dwd2 = dw2.view({E * D, F}).rows(0, D);
  std::printf(
      "%s, %lld tokens x top-%lld over %lld experts: %lld rows, %lld..%lld per expert; %s\n",
      cfg_path.c_str(), (long long)N, (long long)K, (long long)E, (long long)M, (long long)lo,
      (long long)hi, ops::kernel_description(f).c_str());
  std::printf(
      "| GEMM | grouped GFLOP/s | dense GFLOP/s (equal FLOPs) | grouped / dense "
      "|\n|---|---|---|---|\n");
  auto row = [&](const char* what, double flops, const std::function<void()>& grouped,
                 const std::function<void()>& dense) {
    const double tg = seconds(grouped, rounds), td = seconds(dense, rounds);
    std::printf("| %s | %.0f | %.0f | %.0f%% |\n", what, flops / tg / 1e9, flops / td / 1e9,
                100 * td / tg);
  };
  const double f1 = 2.0 * M * D * 2 * F, f2 = 2.0 * M * F * D;
  // weight operands prepared once, as training does once per step (ops::prepare_weight)
  const DType od = ops::gemm_operand_dtype();
  ops::WeightOperands q1, q2, qd1, qd2;
  const bool low = f != ops::Format::F32, sep = ops::weight_dgrad_separate(p);
  auto operands = [&](const Tensor& w, ops::WeightOperands& q) {
    if (!low) return;
    q.fprop = a.alloc(od, {w.numel()});
    q.fprop = Tensor(q.fprop.ptr, od, {w.numel() / w.size(-1), w.size(-1)});
    if (sep)
      q.dgrad = Tensor(a.alloc(od, {w.numel()}).ptr, od, {w.numel() / w.size(-1), w.size(-1)});
    ops::prepare_weight(w, p, q);
  };
  operands(w1, q1), operands(w2, q2), operands(dense_w1, qd1), operands(dense_w2, qd2);
  const ops::WeightOperands *p1 = low ? &q1 : nullptr, *p2 = low ? &q2 : nullptr,
                            *pd1 = low ? &qd1 : nullptr, *pd2 = low ? &qd2 : nullptr;
  Tensor none;
  row(
      "gate/up fprop", f1,
      [&] { ops::grouped_linear_forward(x, ot, w1, gu, {.precision = p, .wq = p1}); },
      [&] { ops::linear_forward(x, dense_w1, gu, {.precision = p, .wq = pd1}); });
  row(
      "down fprop", f2,
      [&] { ops::grouped_linear_forward(h, ot, w2, y, {.precision = p, .wq = p2}); },
      [&] { ops::linear_forward(h, dense_w2, y, {.precision = p, .wq = pd2}); });
  row(
      "gate/up dgrad", f1,
      [&] { ops::grouped_linear_backward(dgu, x, ot, w1, dx, none, {.precision = p, .wq = p1}); },
      [&] { ops::linear_backward(dgu, x, dense_w1, dx, none, {.precision = p, .wq = pd1}); });
  row(
      "gate/up wgrad", f1,
      [&] { ops::grouped_linear_backward(dgu, x, ot, w1, none, dw1, {.precision = p}); },
      [&] { ops::linear_backward(dgu, x, dense_w1, none, dwd1, {.precision = p}); });
  row(
      "down dgrad", f2,
      [&] { ops::grouped_linear_backward(y, h, ot, w2, dh, none, {.precision = p, .wq = p2}); },
      [&] { ops::linear_backward(y, h, dense_w2, dh, none, {.precision = p, .wq = pd2}); });
  row(
      "down wgrad", f2,
      [&] { ops::grouped_linear_backward(y, h, ot, w2, none, dw2, {.precision = p}); },
      [&] { ops::linear_backward(y, h, dense_w2, none, dwd2, {.precision = p}); });
  return 0;
}
