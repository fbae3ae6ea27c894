// fp4_quantize.cpp — the 4-bit formats' quantizer (ops::quantize_fp4; kernels/number_format.h,
// docs/precision.md "NVFP4 and MXFP4"): NVFP4 as Transformer Engine's reference quantizer and
// kernels compute it (E4M3 block decode scales under an fp32 global scale), MXFP4 with TE's
// reference E8M0 rule (the block scale rounded up to a power of two), the 16-point random
// Hadamard transform, and stochastic rounding keyed by logical position (core/rng.h).
// Work is split over rows (Rows) or 16/32-row slabs (Cols, Square); every value is a function of
// its block (and its position, for stochastic rounding), so any thread count gives the same bits.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "core/float4.h"
#include "core/float8.h"
#include "core/rng.h"
#include "kernels/cpu/common.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

const float kHadamardSignsTE[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

namespace {

constexpr int64_t kH = 16;                         // the transform's length
constexpr float kRcp6 = 1.0f / kE2M1Max;           // TE's fp4_max_inv
constexpr float kGlobalNum = kE4M3Max * kE2M1Max;  // 2688

// The transform of 16 values v[i·s] in place: signs, butterflies (strides 1, 2, 4, 8: v·H16 with
// H16 Sylvester's, which is symmetric), then ·1/4. Vectorised over w independent lanes: element i
// of lane j is v[i·s + j].
inline void hadamard_lanes(float* __restrict v, int64_t s, int64_t w, const float* signs) {
  for (int64_t i = 0; i < kH; ++i) {
    const float si = signs[i];
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) v[i * s + j] *= si;
  }
  for (int64_t h = 1; h < kH; h *= 2)
    for (int64_t i = 0; i < kH; ++i) {
      if (i & h) continue;
      float* __restrict a = v + i * s;
      float* __restrict b = v + (i + h) * s;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        const float x = a[j], y = b[j];
        a[j] = x + y;
        b[j] = x - y;
      }
    }
  for (int64_t i = 0; i < kH; ++i)
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) v[i * s + j] *= 0.25f;
}

// Transforms each 16 consecutive elements of one row (n a multiple of 16) from x into y.
inline void hadamard_row(const float* x, int64_t n, const float* signs, float* y) {
  float t[kH * kH];  // 16 groups at a time, transposed so the butterflies run across groups
  for (int64_t g0 = 0; g0 < n; g0 += kH * kH) {
    const int64_t w = std::min<int64_t>(kH, (n - g0) / kH);
    for (int64_t j = 0; j < w; ++j)
      for (int64_t i = 0; i < kH; ++i) t[i * kH + j] = x[g0 + j * kH + i];
    hadamard_lanes(t, kH, w, signs);
    for (int64_t j = 0; j < w; ++j)
      for (int64_t i = 0; i < kH; ++i) y[g0 + j * kH + i] = t[i * kH + j];
  }
}

// max(m, |x|) over n values, NaN ignored (as fmaxf).
inline float amax_of(const float* __restrict x, int64_t n) {
  float m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = std::max(m, std::fabs(x[j]));
  return m;
}

// Everything one quantization needs, fixed before the parallel loops.
struct Plan {
  const float* x;
  int64_t R, C, b;
  Format fmt;
  BlockAxis axis;
  const Fp4Options* o;
  const float* signs;
  float g = 1, gdec = 1, gmult = kRcp6;  // NVFP4: g, 1/g, g·fp32(1/6)
  void* values = nullptr;
  bool values_bf16 = false;
  float* codes = nullptr;
  float* scales = nullptr;
  int64_t slab() const { return axis == BlockAxis::Rows ? 1 : b; }
};

// Rows [r0, r1) of the tensor being quantized: x's, or transformed into buf (Rows: each row;
// Cols: r0, r1 on 16-row boundaries).
const float* source_rows(const Plan& p, int64_t r0, int64_t r1, float* buf) {
  const float* x = p.x + r0 * p.C;
  if (!p.o->hadamard) return x;
  if (p.axis == BlockAxis::Rows) {
    for (int64_t r = r0; r < r1; ++r)
      hadamard_row(x + (r - r0) * p.C, p.C, p.signs, buf + (r - r0) * p.C);
    return buf;
  }
  if (buf != x) std::copy(x, x + (r1 - r0) * p.C, buf);  // (in place: hadamard16 with y = x)
  for (int64_t s = 0; s < r1 - r0; s += kH) hadamard_lanes(buf + s * p.C, p.C, p.C, p.signs);
  return buf;
}

// The scales of n blocks from their amax: dec (the decode scale, as stored) and enc (what the
// elements are multiplied by), as Transformer Engine forms them; selects only, so they vectorise.
void block_scales(const Plan& p, const float* __restrict amax, int64_t n, float* __restrict dec,
                  float* __restrict enc) {
  if (p.fmt == Format::NVFP4) {
    const float gmult = p.gmult, gdec = p.gdec;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float d = e4m3_round_abs(std::min(amax[i] * gmult, FLT_MAX));
      dec[i] = d;
      enc[i] = std::min(1.0f / (d * gdec), FLT_MAX);
    }
    return;
  }
  // MXFP4: 2^e, e = ceil(log2(fp32(amax/6))) exactly, clamped to [-127, 127]
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(amax[i] / kE2M1Max);
    const int32_t E = int32_t(u >> 23), m = int32_t(u & 0x7FFFFFu);
    int32_t e = E == 0 ? (m > 0x400000 ? -126 : -127) : E - 127 + (m != 0);
    e = std::clamp(e, -127, 127);
    dec[i] = std::bit_cast<float>(e == -127 ? 0x00400000u : uint32_t(e + 127) << 23);
    enc[i] = std::bit_cast<float>(e == 127 ? 0x00400000u : uint32_t(127 - e) << 23);
  }
}

// Block k's value repeated over its columns [k·b, min(C, k·b + b)), for nb blocks.
inline void expand_blocks(const float* v, int64_t nb, int64_t b, int64_t C, float* out) {
  for (int64_t k = 0; k < nb; ++k) std::fill_n(out + k * b, std::min(b, C - k * b), v[k]);
}

// byte k of out = byte (i0 + k) % 16 of CounterRng block (i0 + k) / 16 (its 4 words little-end
// first), k < n: the blocks made lane-parallel into words, then their bytes copied.
void random_bytes(const CounterRng& rng, uint64_t i0, int64_t n, uint8_t* out) {
  if (n <= 0) return;
  const uint64_t first = i0 / 16, last = (i0 + uint64_t(n) - 1) / 16;
  uint32_t* words = scratch<uint32_t>(size_t(4 * (last - first + 1)), 1);
  philox4x32_10_blocks(rng.seed(), rng.stream(), first, int64_t(last - first + 1), words);
  static_assert(std::endian::native == std::endian::little, "the words' bytes low byte first");
  std::memcpy(out, reinterpret_cast<const uint8_t*>(words) + (i0 - first * 16), size_t(n));
}

// Quantizes row r (its source values xs) with per-column enc/dec, writing values and codes.
void quantize_row(const Plan& p, int64_t r, const float* __restrict xs, const float* __restrict enc,
                  const float* __restrict dec) {
  const int64_t C = p.C;
  float* __restrict ev = scratch<float>(size_t(C), 1);
  if (p.o->stochastic) {
    uint8_t* __restrict rb = scratch<uint8_t>(size_t(C));
    random_bytes(CounterRng(p.o->seed, p.o->stream), uint64_t(p.o->row0 + r) * uint64_t(C), C, rb);
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) ev[j] = e2m1_stochastic(xs[j] * enc[j], rb[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) ev[j] = e2m1_round(xs[j] * enc[j]);
  }
  if (p.codes) std::copy(ev, ev + C, p.codes + r * C);
  if (p.values && p.values_bf16) {
    uint16_t* __restrict q = static_cast<uint16_t*>(p.values) + r * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) q[j] = bf16_bits(ev[j] * dec[j]);
  } else if (p.values) {
    float* __restrict q = static_cast<float*>(p.values) + r * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) q[j] = ev[j] * dec[j];
  }
}

// Rows [r0, r1), blocks of b along each row.
void quantize_rows(const Plan& p, int64_t r0, int64_t r1) {
  const int64_t C = p.C, b = p.b, nb = (C + b - 1) / b;
  float* buf = scratch<float>(size_t(C), 0);
  float* enc = scratch<float>(size_t(C), 2);
  float* dec = scratch<float>(size_t(C), 3);
  constexpr int64_t kMax = 64;  // blocks per pass
  float bs[3 * kMax];           // their amax, dec, enc
  for (int64_t r = r0; r < r1; ++r) {
    const float* xs = source_rows(p, r, r + 1, buf);
    for (int64_t k0 = 0; k0 < nb; k0 += kMax) {
      const int64_t m = std::min(kMax, nb - k0), c0 = k0 * b;
      for (int64_t k = 0; k < m; ++k) bs[k] = amax_of(xs + c0 + k * b, std::min(b, C - c0 - k * b));
      block_scales(p, bs, m, bs + kMax, bs + 2 * kMax);
      expand_blocks(bs + kMax, m, b, C - c0, dec + c0);
      expand_blocks(bs + 2 * kMax, m, b, C - c0, enc + c0);
      if (p.scales) std::copy(bs + kMax, bs + kMax + m, p.scales + r * nb + k0);
    }
    quantize_row(p, r, xs, enc, dec);
  }
}

// Slab sb: rows [sb·b, sb·b + b) with blocks of b down each column (Cols) or b×b (Square).
void quantize_slab(const Plan& p, int64_t sb) {
  const int64_t C = p.C, b = p.b, r0 = sb * b, r1 = std::min(p.R, r0 + b);
  const float* xs = source_rows(p, r0, r1, scratch<float>(size_t(b * C), 0));
  float* amax = scratch<float>(size_t(C), 1);  // quantize_row reuses slot 1 after the scales
  float* enc = scratch<float>(size_t(C), 2);
  float* dec = scratch<float>(size_t(C), 3);
  std::fill_n(amax, C, 0.0f);
  for (int64_t r = r0; r < r1; ++r) {
    const float* __restrict xr = xs + (r - r0) * C;
    // as maxps: NaN ignored, and the loop vectorises (std::max's compare-and-store did not)
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) {
      const float a = std::fabs(xr[j]), m = amax[j];
      amax[j] = a > m ? a : m;
    }
  }
  if (p.axis == BlockAxis::Square) {
    const int64_t ncb = (C + b - 1) / b;
    float bs[3 * kH];  // amax, dec, enc of up to 16 squares at a time
    for (int64_t k0 = 0; k0 < ncb; k0 += kH) {
      const int64_t m = std::min(kH, ncb - k0), c0 = k0 * b;
      for (int64_t k = 0; k < m; ++k)
        bs[k] = amax_of(amax + c0 + k * b, std::min(b, C - c0 - k * b));
      block_scales(p, bs, m, bs + kH, bs + 2 * kH);
      expand_blocks(bs + kH, m, b, C - c0, dec + c0);
      expand_blocks(bs + 2 * kH, m, b, C - c0, enc + c0);
      if (p.scales) std::copy(bs + kH, bs + kH + m, p.scales + sb * ncb + k0);
    }
  } else {
    block_scales(p, amax, C, dec, enc);
    if (p.scales) std::copy(dec, dec + C, p.scales + sb * C);
  }
  for (int64_t r = r0; r < r1; ++r) quantize_row(p, r, xs + (r - r0) * C, enc, dec);
}

// The amax of the (transformed) tensor: per slab, then the largest (order-free: exact).
float tensor_amax(const Plan& p) {
  const int64_t h = p.o->hadamard ? p.slab() : 1, ns = (p.R + h - 1) / h;
  static thread_local std::vector<float> parts;  // grow-only: no allocation once warm
  if (parts.size() < size_t(ns)) parts.resize(size_t(ns));
  float* part = parts.data();
  std::fill_n(part, ns, 0.0f);
  parallel_ranges_min(ns, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(h * p.C, 1)),
                      [&](int64_t s0, int64_t s1) {
                        float* buf = scratch<float>(size_t(h * p.C), 0);
                        for (int64_t s = s0; s < s1; ++s) {
                          const int64_t r0 = s * h, r1 = std::min(p.R, r0 + h);
                          part[s] = amax_of(source_rows(p, r0, r1, buf), (r1 - r0) * p.C);
                        }
                      });
  float m = 0;
  for (int64_t s = 0; s < ns; ++s) m = std::max(m, part[s]);
  return m;
}

Plan make_plan(const Tensor& x, Format fmt, BlockAxis axis, const Fp4Options& o) {
  MOET_CHECK(is_fp4(fmt), "quantize_fp4 needs nvfp4 or mxfp4, got ", format_name(fmt));
  MOET_CHECK(x.dtype == DType::F32 && x.ndim >= 1, "quantize_fp4: x must be F32, got ",
             dtype_name(x.dtype), " ", x.shape_str());
  MOET_CHECK(fmt == Format::NVFP4 || axis != BlockAxis::Square,
             "mxfp4 blocks are one-dimensional (1×32 or 32×1), not square");
  Plan p{x.f32(), rows_of(x), x.size(-1), format_block(fmt),
         fmt,     axis,       &o,         o.signs ? o.signs : kHadamardSignsTE};
  if (o.hadamard) {
    MOET_CHECK(fmt == Format::NVFP4 && axis != BlockAxis::Square,
               "the Hadamard transform is for nvfp4 rows or cols blocks");
    const int64_t len = axis == BlockAxis::Rows ? p.C : p.R;
    MOET_CHECK(len % kH == 0, "the Hadamard transform needs the blocks' dimension (", len,
               ") to be a multiple of 16");
    for (int64_t i = 0; i < kH; ++i)
      MOET_CHECK(p.signs[i] == 1.0f || p.signs[i] == -1.0f, "Hadamard signs must be +-1");
  }
  return p;
}

// NVFP4's global scale from the amax, as TE's compute_global_encode_scaling_factor_FP4.
void set_global(Plan& p, float amax) {
  float g = std::min(kGlobalNum / amax, FLT_MAX);
  if (amax == 0.0f || g == 0.0f) g = 1.0f;
  p.g = g;
  p.gdec = 1.0f / g;
  p.gmult = g * kRcp6;
}

}  // namespace

float nvfp4_gemm_alpha(float amax_a, float amax_b) {
  constexpr float kFactor = kE2M1Max * kE2M1Max * kE4M3Max * kE4M3Max;  // 7225344, exact
  return (amax_a * amax_b) / kFactor;
}

float nvfp4_global_decode(float amax) {
  Plan p{};
  set_global(p, amax);
  return p.gdec;
}

float fp4_amax(const Tensor& x_RC, BlockAxis axis, const Fp4Options& o) {
  const Plan p = make_plan(x_RC, Format::NVFP4, axis, o);
  return p.R * p.C == 0 ? 0.0f : tensor_amax(p);
}

void hadamard16(const Tensor& x_RC, BlockAxis axis, const float* signs, Tensor& y_RC) {
  Fp4Options o;
  o.hadamard = true;
  o.signs = signs;
  const Plan p = make_plan(x_RC, Format::NVFP4, axis, o);
  MOET_CHECK(y_RC.dtype == DType::F32 && y_RC.numel() == x_RC.numel(), "hadamard16: y ",
             y_RC.shape_str(), " for x ", x_RC.shape_str());
  const int64_t h = p.slab(), ns = (p.R + h - 1) / h;
  float* y = y_RC.f32();
  parallel_ranges_min(ns, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(h * p.C, 1)),
                      [&](int64_t s0, int64_t s1) {
                        for (int64_t s = s0; s < s1; ++s)
                          source_rows(p, s * h, std::min(p.R, s * h + h), y + s * h * p.C);
                      });
}

Fp4Result quantize_fp4(const Tensor& x_RC, Format fmt, BlockAxis axis, const Fp4Outputs& out,
                       const Fp4Options& o) {
  OpScope op_scope(format_traits(fmt).quantizer, 0,
                   double(x_RC.bytes() + out.values.bytes() + out.codes.bytes()));
  Plan p = make_plan(x_RC, fmt, axis, o);
  const int64_t n = x_RC.numel(), ns = scale_count(x_RC, fmt, axis);
  MOET_CHECK(
      out.values.empty() || ((out.values.dtype == DType::F32 || out.values.dtype == DType::BF16) &&
                             out.values.numel() == n),
      "quantize_fp4: values must be F32 or BF16 of x's size, got ", out.values.shape_str());
  MOET_CHECK(out.codes.empty() || (out.codes.dtype == DType::F32 && out.codes.numel() == n),
             "quantize_fp4: codes must be F32 of x's size, got ", out.codes.shape_str());
  MOET_CHECK(out.scales.empty() || (out.scales.dtype == DType::F32 && out.scales.numel() == ns),
             "quantize_fp4: scales must be F32 with ", ns, " entries, got ",
             out.scales.shape_str());
  p.values = out.values.ptr;
  p.values_bf16 = out.values.dtype == DType::BF16;
  p.codes = out.codes.empty() ? nullptr : out.codes.f32();
  p.scales = out.scales.empty() ? nullptr : out.scales.f32();
  Fp4Result res;
  if (n == 0) return res;
  if (fmt == Format::NVFP4) {
    res.amax = o.global_amax >= 0.0f ? o.global_amax : tensor_amax(p);
    set_global(p, res.amax);
    res.global_scale = p.g;
  }
  const int64_t h = p.slab(), ns_rows = (p.R + h - 1) / h;
  parallel_ranges_min(ns_rows, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(h * p.C, 1)),
                      [&](int64_t s0, int64_t s1) {
                        if (p.axis == BlockAxis::Rows)
                          quantize_rows(p, s0, s1);
                        else
                          for (int64_t s = s0; s < s1; ++s) quantize_slab(p, s);
                      });
  return res;
}

}  // namespace moet::ops
