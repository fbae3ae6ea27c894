#include "measure/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/arena.h"
#include "kernels/ops.h"
#include "measure/best_of.h"
#include "measure/speed_cache.h"

namespace moet {

namespace {

GemmPeak measure_peak(DType operands, const BestOf& how) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int64_t n = 1024;
  Arena arena(4 * n * n * sizeof(float));
  Tensor c = arena.alloc_f32({n, n}), a32 = arena.alloc_f32({n, n}), b32 = arena.alloc_f32({n, n});
  ops::fill(a32, 0.5);
  ops::fill(b32, 0.25);
  Tensor a = a32, b = b32;
  GemmPeak p;
  if (operands == DType::BF16) {
    a = arena.alloc(DType::BF16, {n, n});
    b = arena.alloc(DType::BF16, {n, n});
    ops::quantize(a32, ops::Format::BF16, ops::BlockAxis::Rows, a);
    ops::quantize(b32, ops::Format::BF16, ops::BlockAxis::Rows, b);
    p.operands = "bf16";
  }
  int calls = 0;
  const double s = best_seconds(
      [&] {
        ops::gemm(a, false, b, true, c);
        ++calls;
      },
      how);
  p.tflops = 2.0 * n * n * n / s / 1e12;
  p.threads = ops::num_threads();
  p.calls = calls - how.warmups;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

std::string peak_key(DType operands) {
  return machine_key() + " | peak 1024^3 " + (operands == DType::BF16 ? "bf16" : "fp32");
}

// The best call after warm-ups, over at least 20 calls and 1 s: a neighbour or a start-up hiccup
// (cold threads, page faults) only slows calls down, so the fastest is the machine's own speed
// and a busy moment does not lower the peak and inflate MFU.
constexpr BestOf kThorough{.warmups = 3, .min_calls = 20, .min_seconds = 1.0, .max_calls = 100000};
// A run's own look, a tenth of a second: with the cache's best of every earlier look, the peak
// converges on the machine's own speed without any run paying a second for it.
constexpr BestOf kGlance{.warmups = 1, .min_calls = 4, .min_seconds = 0.1, .max_calls = 50};

// The faster of `p` and the cached peak, which it then is.
GemmPeak keep_best(DType operands, GemmPeak p) {
  if (const std::optional<GemmPeak> c = cached_gemm_peak(operands); c && c->tflops > p.tflops) {
    p.tflops = c->tflops;
    p.cached = true;
  }
  remember_speed(peak_key(operands), {{"tflops", p.tflops}});
  return p;
}

}  // namespace

GemmPeak measure_gemm_peak(ops::Format fmt) {
  const DType operands = fmt != ops::Format::F32 ? ops::gemm_operand_dtype() : DType::F32;
  const GemmPeak p = measure_peak(operands, kThorough);
  keep_best(operands, p);
  return p;
}

std::optional<GemmPeak> cached_gemm_peak(DType operands) {
  const std::optional<nlohmann::json> c = cached_speed(peak_key(operands));
  if (!c || !c->is_object() || c->value("tflops", 0.0) <= 0) return std::nullopt;
  GemmPeak p;
  p.tflops = (*c)["tflops"].get<double>();
  p.operands = operands == DType::BF16 ? "bf16" : "fp32";
  p.threads = ops::num_threads();
  p.cached = true;
  return p;
}

GemmPeak gemm_peak(DType operands) { return keep_best(operands, measure_peak(operands, kGlance)); }

std::string describe_gemm_peak(const GemmPeak& p) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s GEMM peak %.3f TFLOP/s (1024^3, best of %d calls on %d %s%s)",
                p.operands, p.tflops, p.calls, p.threads, p.threads == 1 ? "thread" : "threads",
                p.cached ? " and of earlier runs on this CPU" : "");
  return buf;
}

nlohmann::json GemmPeaks::json() const {
  auto value = [](const GemmPeak& p) {
    return p.tflops > 0 ? nlohmann::json(p.tflops) : nlohmann::json(nullptr);
  };
  return {{"fp32", value(fp32)},
          {"bf16", value(bf16)},
          {"best", std::max(fp32.tflops, bf16.tflops)},
          {"mfu_divides_by", mfu},
          {"mfu_peak", fp32.tflops <= 0   ? "--peak-tflops"
                       : recipe_uses_bf16 ? "bf16"
                                          : "fp32"}};
}

std::string GemmPeaks::describe() const {
  char buf[320];
  if (fp32.tflops <= 0) {
    std::snprintf(buf, sizeof buf, "MFU divides by --peak-tflops %.3f TFLOP/s", mfu);
    return buf;
  }
  const bool cached = fp32.cached || bf16.cached;
  if (bf16.tflops > 0)
    std::snprintf(buf, sizeof buf,
                  "GEMM peaks: fp32 %.3f, bf16 %.3f TFLOP/s (1024^3, best of %d and %d calls on %d "
                  "%s%s); MFU divides by the %s one (the recipe's)",
                  fp32.tflops, bf16.tflops, fp32.calls, bf16.calls, fp32.threads,
                  fp32.threads == 1 ? "thread" : "threads",
                  cached ? " and of earlier runs on this CPU" : "",
                  recipe_uses_bf16 ? "bf16" : "fp32");
  else
    std::snprintf(buf, sizeof buf, "MFU divides by the %s", describe_gemm_peak(fp32).c_str());
  return buf;
}

}  // namespace moet
