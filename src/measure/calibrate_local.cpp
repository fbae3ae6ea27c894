#include "measure/calibrate_local.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "measure/best_of.h"
#include "measure/gemm_peak.h"
#include "measure/stream.h"

namespace moet {

using sim::SystemSpec;

namespace {

struct GemmPoint {
  double m, n, k, tflops;
};

std::vector<GemmPoint> measure_gemms() {
  std::vector<GemmPoint> pts;
  const std::vector<int64_t> ms = {256, 2048}, nks = {64, 384, 1536};
  std::vector<std::array<int64_t, 3>> shapes = {{1024, 1024, 1024}};
  for (int64_t m : ms)
    for (int64_t n : nks)
      for (int64_t k : nks) shapes.push_back({m, n, k});
  // The three products of a linear layer: forward x·Wᵀ, data gradient dy·W, weight gradient
  // dyᵀ·x; each shape's rate is the rate of the three together.
  for (auto [m, n, k] : shapes) {
    Arena arena((m * k + n * k + m * n) * 2 * sizeof(float) + 512);
    Tensor x = arena.alloc_f32({m, k}), w = arena.alloc_f32({n, k}), y = arena.alloc_f32({m, n});
    Tensor dx = arena.alloc_f32({m, k}), dw = arena.alloc_f32({n, k}), dy = arena.alloc_f32({m, n});
    ops::fill(x, 0.5), ops::fill(w, 0.25), ops::fill(dy, 0.125);
    const double s = best_seconds(
        [&] {
          ops::gemm(x, false, w, true, y);
          ops::gemm(dy, false, w, false, dx);
          ops::gemm(dy, true, x, false, dw);
        },
        BestOf{.min_seconds = 0.1, .cold_caches = true});
    pts.push_back({double(m), double(n), double(k), 6.0 * m * n * k / s / 1e12});
  }
  return pts;
}

// Fits efficiency = g · Π x/(x + d) to the measured GEMMs (least squares in log space).
void fit_gemm(const std::vector<GemmPoint>& pts, double peak, double& g, double& d) {
  double best_err = 1e30;
  for (double dd = 1; dd <= 4096; dd *= 1.05) {
    auto shape = [dd](const GemmPoint& p) {
      return p.m / (p.m + dd) * p.n / (p.n + dd) * p.k / (p.k + dd);
    };
    double mean = 0;
    for (auto& p : pts) mean += std::log(p.tflops / peak) - std::log(shape(p));
    mean /= double(pts.size());
    double err = 0;
    for (auto& p : pts) {
      const double r = std::log(p.tflops / peak) - std::log(shape(p)) - mean;
      err += r * r;
    }
    if (err < best_err) best_err = err, g = std::exp(mean), d = dd;
  }
}

// The GEMM grid again on one thread (then back to `used`): the half dimension of its curve.
double one_thread_half_dim(int used, double d, const std::function<void(const std::string&)>& say) {
  ops::set_num_threads(1);
  const std::vector<GemmPoint> one = measure_gemms();
  ops::set_num_threads(used);
  double peak = 0, g = 1;
  for (auto& p : one) peak = std::max(peak, p.tflops);
  fit_gemm(one, peak, g, d);
  say(str("fp32 GEMM on one thread: peak ", peak * 1e3, " GFLOP/s, half dimension ", d,
          " (ranks running one thread each)"));
  return d;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Progress lines of moet bench (none without a log).
using Say = std::function<void(const std::string&)>;

// GEMMs: the efficiency curve fitted over the grid; the peak is its asymptote (or the best
// shape measured, when that lies above it). Returns the peak (TFLOP/s).
double calibrate_gemms(SystemSpec& s, int used, const Say& say) {
  const std::vector<GemmPoint> pts = measure_gemms();
  double peak = 0;
  for (auto& p : pts) peak = std::max(peak, p.tflops);
  double g = 1, d = 64;
  fit_gemm(pts, peak, g, d);
  // The curve's asymptote may lie above the best shape measured: then it is the peak.
  if (g > 1) peak *= g, g = 1;
  s.peak_tflops["fp32"] = peak;
  s.eff.gemm_max["fp32"] = g;
  s.eff.gemm_half_dim["fp32"] = d;
  say(str("fp32 GEMM peak (forward + both gradients) ", peak * 1e3, " GFLOP/s over ", pts.size(),
          " shapes; efficiency fit ", g, " * prod x/(x+", d, ") (the simulator's peak)"));
  // The ranks of `mpirun -np N` run threads / N threads each (moet train); at one thread each
  // their GEMMs follow the one-thread curve, whose small shapes lose less.
  s.threads = used;
  if (used > 1) s.eff.gemm_half_dim_one_thread["fp32"] = one_thread_half_dim(used, d, say);
  // The peak MFU divides by, measured as moet train measures it at start-up (same function,
  // same thread count): fp32, and bf16 where the CPU multiplies bf16.
  say("MFU's peak, as moet train measures it: " + describe_gemm_peak(measure_gemm_peak()));
  if (ops::gemm_operand_dtype() == DType::BF16)
    say("MFU's peak, as moet train measures it: " +
        describe_gemm_peak(measure_gemm_peak(ops::Format::BF16)));
  return peak;
}

// Causal attention (moet's kernel: flash attention, backward recomputes the probabilities), as
// a share of the GEMM peak (TFLOP/s).
void calibrate_attention(SystemSpec& s, double peak, const Say& say) {
  const int64_t B = 4, T = 256, H = 8, K = 64, Vd = 64;
  Arena arena((3 * B * T * H * K + 3 * B * T * H * Vd + B * H * T * T + 8) * 4 * 2);
  Tensor q = arena.alloc_f32({B, T, H, K}), k = arena.alloc_f32({B, T, H, K});
  Tensor v = arena.alloc_f32({B, T, H, Vd}), o = arena.alloc_f32({B, T, H, Vd});
  Tensor lse = arena.alloc_f32({B, H, T}), dq = arena.alloc_f32({B, T, H, K});
  Tensor dk = arena.alloc_f32({B, T, H, K}), dv = arena.alloc_f32({B, T, H, Vd});
  ops::fill(q, 0.01), ops::fill(k, 0.02), ops::fill(v, 0.03);
  const double scale = 1 / std::sqrt(double(K));
  const double tf = best_seconds([&] { ops::attention_forward(q, k, v, scale, lse, o); },
                                 BestOf{.min_seconds = 0.3});
  const double tb =
      best_seconds([&] { ops::attention_backward(o, q, k, v, o, lse, scale, dq, dk, dv); },
                   BestOf{.min_seconds = 0.3});
  const double flops = double(B) * T * T * H * (K + Vd);  // causal: half of 2·T²
  s.eff.attention_fwd = std::min(1.0, flops / tf / (peak * 1e12));
  s.eff.attention_bwd = std::min(1.0, 2.5 * flops / tb / (peak * 1e12));
  say(str("attention forward ", flops / tf / 1e9, " GFLOP/s, backward ", 2.5 * flops / tb / 1e9,
          " GFLOP/s (causal FLOPs)"));
}

// Memory-bound kernels on activation-sized tensors (2048 rows: micro-batch x sequence), and the
// fixed cost of one op call.
void calibrate_memory_bound(SystemSpec& s, const Say& say) {
  const int64_t N = 2048, D = 384, F = 1024;
  Arena arena((6 * N * D + 5 * N * F + 2 * D + N) * 4 + 1024);
  Tensor x = arena.alloc_f32({N, D}), y = arena.alloc_f32({N, D}), dx = arena.alloc_f32({N, D});
  Tensor w = arena.alloc_f32({D}), dw = arena.alloc_f32({D}), rstd = arena.alloc_f32({N});
  Tensor gu = arena.alloc_f32({N, 2 * F}), hh = arena.alloc_f32({N, F});
  Tensor dgu = arena.alloc_f32({N, 2 * F});
  ops::fill(x, 0.5), ops::fill(w, 1.0), ops::fill(gu, 0.1), ops::fill(hh, 0.2);
  double bytes = 0, secs = 0;
  auto run = [&](double b, const std::function<void()>& fn) {
    bytes += b * 4;
    secs += best_seconds(fn, BestOf{.min_seconds = 0.05});
  };
  run(2.0 * N * D, [&] { ops::rmsnorm_forward(x, w, 1e-6, y, rstd); });
  run(3.0 * N * D, [&] { ops::rmsnorm_backward(y, x, w, rstd, dx, false, dw); });
  run(3.0 * N * F, [&] { ops::swiglu_forward(gu, hh); });
  run(5.0 * N * F, [&] { ops::swiglu_backward(hh, gu, dgu); });
  run(3.0 * N * D, [&] { ops::add(x, y, dx); });
  s.hbm_tbps = bytes / secs / 1e12;
  s.eff.hbm = 1.0;
  say(str("memory-bound kernels ", bytes / secs / 1e9, " GB/s (norm, SwiGLU, add; 2048 rows)"));

  Tensor tiny_a = arena.alloc_f32({16}), tiny_b = arena.alloc_f32({16});
  ops::fill(tiny_a, 1), ops::fill(tiny_b, 2);
  const auto thousand_adds = [&] {
    for (int i = 0; i < 1000; ++i) ops::add(tiny_a, tiny_b, tiny_b);
  };
  const double t_op = best_seconds(thousand_adds) / 1000;
  s.eff.op_overhead_us = t_op * 1e6;
  say(str("per-op overhead ", t_op * 1e6, " us"));
}

// Messages between ranks of this machine travel through shared memory: copied in and out. Every
// rank of `mpirun` here is in one domain whose exchanges and collectives run at that speed.
void calibrate_links(SystemSpec& s, const Say& say) {
  const size_t n = size_t(8) << 20;
  std::vector<char> src(n, 1), dst(n, 0);
  const double t =
      best_seconds([&] { std::memcpy(dst.data(), src.data(), n); }, BestOf{.min_seconds = 0.05});
  s.nvlink_gbps = double(n) / t / 1e9 / 2;
  s.scaleout_gbps = s.nvlink_gbps;
  say(str("copy ", double(n) / t / 1e9, " GB/s: rank-to-rank ", s.nvlink_gbps, " GB/s"));
  s.nvlink_domain = 64;  // every rank of `mpirun` on this machine shares its memory
  s.eff.a2a_nvlink = s.eff.a2a_scaleout = 1.0;
  s.eff.collective_nvlink = s.eff.collective_scaleout = 1.0;
  s.eff.a2a_sm_fraction = s.eff.collective_sm_fraction = 0;
}

// The description and each measured field's source: this CPU, the thread count, the time.
void describe_measurement(SystemSpec& s, int used) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  s.description =
      str("this machine (", cpu_name(), ", ", used, " threads), measured by moet bench ", when);
  const std::string src = str("measured by moet bench with ", used, " threads, ", when);
  for (const char* k : {"peak_tflops", "gemm_max", "gemm_half_dim", "attention_fwd",
                        "attention_bwd", "hbm_tbps", "op_overhead_us", "nvlink_gbps"})
    s.sources[k] = src;
  s.sources["nvlink_domain"] = "one machine: all MPI ranks share memory and cores";
  if (used > 1)
    s.sources["gemm_half_dim_one_thread"] = str("measured by moet bench with 1 thread, ", when);
}

}  // namespace

SystemSpec calibrate_local(int threads, std::FILE* log) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  ops::set_num_threads(threads > 0 ? threads : cores);
  const int used = ops::num_threads();
  const Say say = [&](const std::string& s) {
    if (log) std::fprintf(log, "moet bench: %s\n", s.c_str()), std::fflush(log);
  };
  SystemSpec s;
  s.name = "local";
  s.compute_shared = true;
  const double peak = calibrate_gemms(s, used, say);
  calibrate_attention(s, peak, say);
  calibrate_memory_bound(s, say);
  say(describe_stream(measure_stream(stream_array_bytes()), used));
  calibrate_links(s, say);
  s.hbm_gb = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / 1e9;
  describe_measurement(s, used);
  return s;
}

}  // namespace moet
