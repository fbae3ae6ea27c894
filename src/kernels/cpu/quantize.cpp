// quantize.cpp — the FP8 recipes' block quantizers and bf16 rounding (kernels/number_format.h,
// docs/precision.md). Scales follow Transformer Engine: MXFP8's E8M0 exponent is amax·(1/448)
// rounded up to a power of two; FP8Block's scale is 448/amax rounded down to a power of two.
// Amax ignores NaN (as fmaxf does); a NaN element stays NaN.
#include <bit>
#include <cfloat>
#include <cstring>
#include <type_traits>

#include "core/bf16.h"
#include "core/float4.h"
#include "core/float8.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/emit.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

// One block's scaling: q = e4m3(x · mult), value = q · deq; `code` is the packed scale (E8M0
// exponent for MXFP8).
struct BlockScale {
  float mult, deq;
  uint8_t code;
};

// The scales of n blocks from their amax (never NaN: amax ignores NaN), as Transformer Engine
// computes them — MXFP8: float_to_e8m0(amax · fp32(1/448)), the biased exponent rounded up,
// and the multiplier exp2f_rcp (1 for e = 0); FP8Block: 448/amax rounded down to a power of
// two — with selects only, so the loops vectorise: mult[i], deq[i], and code[i] (the E8M0
// exponent, MXFP8) when non-null.
void block_scales(Format f, const float* __restrict amax, int64_t n, float* __restrict mult,
                  float* __restrict deq, uint8_t* __restrict code) {
  if (f == Format::MXFP8) {
    constexpr float kRcp448 = 1.0f / kE4M3Max;
    uint8_t codes[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
      const int64_t m = std::min<int64_t>(256, n - i0);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) {
        const float v = amax[i0 + i] * kRcp448;
        const uint32_t u = std::bit_cast<uint32_t>(v), e = u >> 23, man = u & 0x7FFFFFu;
        const uint32_t up = (man != 0) & (e != 0xFEu) & !((e == 0) & (man <= 0x400000u));
        const uint32_t ex = e == 0xFFu ? 0xFEu : e + up;  // +Inf: 0xFE (TE's float_to_e8m0)
        mult[i0 + i] = ex == 0 ? 1.0f : std::bit_cast<float>((254u - ex) << 23);
        deq[i0 + i] = std::bit_cast<float>(ex == 0 ? 0x00400000u : ex << 23);
        codes[i] = uint8_t(ex);
      }
      if (code) std::copy(codes, codes + m, code + i0);
    }
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float a = amax[i];
    const bool plain = a == 0.0f || a > FLT_MAX;  // zero or +Inf: scale 1
    float s = kE4M3Max / (plain ? 1.0f : a);
    s = s > FLT_MAX ? FLT_MAX : s;
    s = std::bit_cast<float>(std::bit_cast<uint32_t>(s) & 0xFF800000u);
    s = plain ? 1.0f : s;
    mult[i] = s;
    deq[i] = 1.0f / s;
  }
}

BlockScale block_scale(Format f, float amax) {
  BlockScale s{};
  block_scales(f, &amax, 1, &s.mult, &s.deq, &s.code);
  return s;
}

// The value an element quantizes to (sign kept, NaN stays NaN): e4m3_round_abs of |x·mult|
// times deq, written with selects and bit operations only, so the loops over it vectorise.
inline float fp8_value(float x, float mult, float deq) {
  const float y = x * mult;
  const uint32_t yb = std::bit_cast<uint32_t>(y), ab = yb & 0x7FFFFFFFu;
  const float a = std::bit_cast<float>(ab);
  const float normal = std::bit_cast<float>((ab + 0x7FFFFu + ((ab >> 20) & 1u)) & 0xFFF00000u);
  const float sub = (a + 16384.0f) - 16384.0f;
  const float v = std::min(a < 0.015625f ? sub : normal, kE4M3Max) * deq;
  const float signed_v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) | (yb & 0x80000000u));
  return ab > 0x7F800000u ? y : signed_v;
}

inline float store_value(float v, float*) { return v; }
inline uint16_t store_value(float v, uint16_t*) { return bf16_bits(v); }

// max(m, |x|), NaN ignored (as fmaxf): std::max keeps m when |x| is NaN.
inline float abs_max(float m, float x) { return std::max(m, std::fabs(x)); }

// q[j] = the values of x[j], j < n, with one scale (mult, deq), or a scale per element.
template <typename Q>
inline void fp8_values(const float* __restrict x, int64_t n, float mult, float deq,
                       Q* __restrict q) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) q[j] = store_value(fp8_value(x[j], mult, deq), q);
}
template <typename Q>
inline void fp8_values(const float* __restrict x, int64_t n, const float* __restrict mult,
                       const float* __restrict deq, Q* __restrict q) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) q[j] = store_value(fp8_value(x[j], mult[j], deq[j]), q);
}

inline float block_amax(const float* __restrict x, int64_t n) {
  float m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = abs_max(m, x[j]);
  return m;
}

// Output targets of one quantization: any may be null.
template <typename Q>
struct Outputs {
  Q* q;
  uint8_t* codes;
  uint8_t* scale_u8;  // MXFP8
  float* scale_f32;   // FP8Block
  void put_scale(int64_t i, const BlockScale& s) const {
    if (scale_u8) scale_u8[i] = s.code;
    if (scale_f32) scale_f32[i] = s.deq;
  }
};

// Blocks of kB consecutive elements in each row: per row, the blocks' amax, then their scales
// (block_scales, vectorised across blocks), then the values block by block (full blocks with a
// trip count known at compile time) and the last partial block.
template <int64_t kB, typename Q>
void quantize_rows_b(const float* x, int64_t R, int64_t C, Format f, const Outputs<Q>& o) {
  const int64_t nb = (C + kB - 1) / kB;
  parallel_ranges_min(R, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(C, 1)),
                      [&](int64_t r0, int64_t r1) {
                        constexpr int64_t kMax = 256;  // blocks per pass
                        float amax[kMax], mult[kMax], deq[kMax];
                        uint8_t code[kMax];
                        for (int64_t r = r0; r < r1; ++r)
                          for (int64_t k0 = 0; k0 < nb; k0 += kMax) {
                            const int64_t k1 = std::min(nb, k0 + kMax);
                            for (int64_t k = k0; k < k1; ++k) {
                              const int64_t c0 = k * kB;
                              amax[k - k0] = C - c0 >= kB ? block_amax(x + r * C + c0, kB)
                                                          : block_amax(x + r * C + c0, C - c0);
                            }
                            block_scales(f, amax, k1 - k0, mult, deq, o.scale_u8 ? code : nullptr);
                            for (int64_t k = k0; k < k1; ++k) {
                              const int64_t c0 = k * kB, n = std::min(C - c0, kB), i = k - k0;
                              const float* xr = x + r * C + c0;
                              if (o.scale_u8) o.scale_u8[r * nb + k] = code[i];
                              if (o.scale_f32) o.scale_f32[r * nb + k] = deq[i];
                              if (o.q) {
                                if (n == kB)
                                  fp8_values(xr, kB, mult[i], deq[i], o.q + r * C + c0);
                                else
                                  fp8_values(xr, n, mult[i], deq[i], o.q + r * C + c0);
                              }
                              if (o.codes)
                                for (int64_t c = 0; c < n; ++c)
                                  o.codes[r * C + c0 + c] = e4m3_bits(xr[c] * mult[i]);
                            }
                          }
                      });
}

template <typename Q>
void quantize_rows(const float* x, int64_t R, int64_t C, int64_t b, Format f, const Outputs<Q>& o) {
  if (b == 32) return quantize_rows_b<32>(x, R, C, f, o);
  MOET_ASSERT(b == 128);
  quantize_rows_b<128>(x, R, C, f, o);
}

// Blocks of b consecutive rows in each column (or b×b squares when square).
template <typename Q>
void quantize_cols(const float* x, int64_t R, int64_t C, int64_t b, bool square, Format f,
                   const Outputs<Q>& o) {
  const int64_t nrb = (R + b - 1) / b, ncb = square ? (C + b - 1) / b : C;
  constexpr int64_t kChunk = 256;  // columns per task
  const int64_t chunks = (C + kChunk - 1) / kChunk;
  parallel_ranges_min(
      nrb * chunks, std::max<int64_t>(1, kParallelMin / (b * kChunk)), [&](int64_t t0, int64_t t1) {
        float amax[kChunk], mult[kChunk], deq[kChunk];
        uint8_t code[kChunk];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t rb = t / chunks, j0 = (t % chunks) * kChunk, j1 = std::min(C, j0 + kChunk);
          const int64_t r0 = rb * b, r1 = std::min(R, r0 + b), w = j1 - j0;
          std::fill_n(amax, w, 0.0f);
          for (int64_t r = r0; r < r1; ++r) {
            const float* __restrict xr = x + r * C + j0;
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) amax[j] = abs_max(amax[j], xr[j]);
          }
          if (square) {  // one scale per b columns: kChunk is a multiple of b (128)
            for (int64_t j = 0; j < w; j += b) {
              const int64_t n = std::min(w, j + b) - j;
              const BlockScale s = block_scale(f, block_amax(amax + j, n));
              std::fill_n(mult + j, n, s.mult);
              std::fill_n(deq + j, n, s.deq);
              o.put_scale(rb * ncb + (j0 + j) / b, s);
            }
          } else {
            block_scales(f, amax, w, mult, deq, o.scale_u8 ? code : nullptr);
            for (int64_t j = 0; j < w; ++j) {
              if (o.scale_u8) o.scale_u8[rb * ncb + j0 + j] = code[j];
              if (o.scale_f32) o.scale_f32[rb * ncb + j0 + j] = deq[j];
            }
          }
          for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * C + j0;
            if (o.q) fp8_values(xr, w, mult, deq, o.q + r * C + j0);
            if (o.codes)
              for (int64_t j = 0; j < w; ++j) o.codes[r * C + j0 + j] = e4m3_bits(xr[j] * mult[j]);
          }
        }
      });
}

template <typename Q>
void round_or_copy(const float* x, int64_t n, Format f, Q* q) {
  parallel_ranges(n, [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<Q, uint16_t>) {
      f32_to_bf16(x + i0, q + i0, i1 - i0);  // bf16_bits of a bf16 value is exact: F32 too
    } else if (f == Format::BF16) {
      round_bf16_f32(x + i0, q + i0, i1 - i0);
    } else {
      std::copy(x + i0, x + i1, q + i0);
    }
  });
}

// Rows and columns of the 2-D view, and the scale grid of (fmt, axis).
struct Grid {
  int64_t R, C, b, rows, cols;
};

Grid grid_of(const Tensor& x, Format f, BlockAxis axis) {
  MOET_CHECK(x.ndim >= 1, "quantize needs a tensor with at least one dimension");
  const int64_t C = x.size(-1), R = rows_of(x), b = format_block(f);
  MOET_CHECK(!(f == Format::MXFP8 && axis == BlockAxis::Square),
             "MXFP8 blocks are one-dimensional (1×32 or 32×1), not square");
  switch (axis) {
    case BlockAxis::Rows:
      return {R, C, b, R, (C + b - 1) / b};
    case BlockAxis::Cols:
      return {R, C, b, (R + b - 1) / b, C};
    case BlockAxis::Square:
      return {R, C, b, (R + b - 1) / b, (C + b - 1) / b};
  }
  return {};
}

template <typename Q>
void quantize_into(const Tensor& x, Format f, BlockAxis axis, const Outputs<Q>& o) {
  const Grid g = grid_of(x, f, axis);
  const float* xs = x.f32();
  if (axis == BlockAxis::Rows)
    quantize_rows(xs, g.R, g.C, g.b, f, o);
  else
    quantize_cols(xs, g.R, g.C, g.b, axis == BlockAxis::Square, f, o);
}

}  // namespace

namespace cpu {

void quantize_span(const float* x, int64_t R, int64_t C, Format f, BlockAxis axis, void* q,
                   DType qt) {
  MOET_ASSERT((qt == DType::F32 || qt == DType::BF16) && !is_fp4(f));
  if (R == 0 || C == 0) return;
  const int64_t n = R * C;
  if (!is_fp8(f)) {
    if (qt == DType::BF16)
      round_or_copy(x, n, f, static_cast<uint16_t*>(q));
    else if (f == Format::BF16 || q != x)
      round_or_copy(x, n, f, static_cast<float*>(q));
    return;
  }
  const int64_t b = format_block(f);
  auto run = [&](auto* out) {
    using Q = std::remove_pointer_t<decltype(out)>;
    const Outputs<Q> o{out, nullptr, nullptr, nullptr};
    if (axis == BlockAxis::Rows)
      quantize_rows(x, R, C, b, f, o);
    else
      quantize_cols(x, R, C, b, axis == BlockAxis::Square, f, o);
  };
  if (qt == DType::BF16)
    run(static_cast<uint16_t*>(q));
  else
    run(static_cast<float*>(q));
}

}  // namespace cpu

Operand Operand::row_range(int64_t r0, int64_t r1) const {
  MOET_ASSERT(cols.empty() || !is_fp8(fmt));
  Operand o;
  o.fmt = fmt;
  if (!rows.empty()) o.rows = rows.rows(r0, r1);
  return o;
}

void quantize_operand(const Tensor& x_RC, const Operand& q) {
  OpScope op_scope(format_traits(q.fmt).quantizer, 0,
                   double(x_RC.bytes() + q.rows.bytes() + q.cols.bytes()));
  MOET_CHECK(x_RC.dtype == DType::F32, "quantize_operand: x must be F32, got ",
             dtype_name(x_RC.dtype));
  MOET_CHECK(!is_fp4(q.fmt), "quantize_operand: ", format_name(q.fmt),
             " operands are formed by the GEMMs (fp4_operands.h), not by producers");
  for (const Tensor* t : {&q.rows, &q.cols})
    MOET_CHECK(t->empty() || t->numel() == x_RC.numel(), "quantize_operand: ", t->shape_str(),
               " for x ", x_RC.shape_str());
  cpu::emit_all(q, x_RC.f32(), rows_of(x_RC), x_RC.size(-1));
}

int64_t scale_count(const Tensor& x_RC, Format fmt, BlockAxis axis) {
  const Grid g = grid_of(x_RC, fmt, axis);
  return g.rows * g.cols;
}

void quantize(const Tensor& x_RC, Format fmt, BlockAxis axis, Tensor& q_RC) {
  OpScope op_scope(format_traits(fmt).quantizer, 0, double(x_RC.bytes() + q_RC.bytes()));
  MOET_CHECK(x_RC.dtype == DType::F32, "quantize: x must be F32, got ", dtype_name(x_RC.dtype));
  MOET_CHECK(!is_fp4(fmt), "quantize: ", format_name(fmt), " goes through quantize_fp4");
  MOET_CHECK(q_RC.numel() == x_RC.numel(), "quantize: q ", q_RC.shape_str(), " for x ",
             x_RC.shape_str());
  MOET_CHECK(q_RC.dtype == DType::F32 || q_RC.dtype == DType::BF16,
             "quantize: q must be F32 or BF16, got ", dtype_name(q_RC.dtype));
  const bool bf = q_RC.dtype == DType::BF16;
  if (!is_fp8(fmt)) {
    if (bf)
      round_or_copy(x_RC.f32(), x_RC.numel(), fmt, q_RC.bf16());
    else if (fmt == Format::BF16 || q_RC.ptr != x_RC.ptr)
      round_or_copy(x_RC.f32(), x_RC.numel(), fmt, q_RC.f32());
    return;
  }
  if (bf)
    quantize_into(x_RC, fmt, axis, Outputs<uint16_t>{q_RC.bf16(), nullptr, nullptr, nullptr});
  else
    quantize_into(x_RC, fmt, axis, Outputs<float>{q_RC.f32(), nullptr, nullptr, nullptr});
}

void quantize_packed(const Tensor& x_RC, Format fmt, BlockAxis axis, Tensor& codes_RC,
                     Tensor& scales, Tensor& q_RC) {
  MOET_CHECK(is_fp8(fmt), "quantize_packed needs an FP8 format, got ", format_name(fmt));
  MOET_CHECK(x_RC.dtype == DType::F32, "quantize: x must be F32, got ", dtype_name(x_RC.dtype));
  MOET_CHECK(codes_RC.dtype == DType::U8 && codes_RC.numel() == x_RC.numel(),
             "quantize: codes must be U8 of x's size, got ", codes_RC.shape_str());
  const int64_t ns = scale_count(x_RC, fmt, axis);
  const DType sd = fmt == Format::MXFP8 ? DType::U8 : DType::F32;
  MOET_CHECK(scales.dtype == sd && scales.numel() == ns, "quantize: scales must be ",
             dtype_name(sd), " with ", ns, " entries, got ", dtype_name(scales.dtype), " ",
             scales.shape_str());
  MOET_CHECK(q_RC.empty() || (q_RC.dtype == DType::F32 && q_RC.numel() == x_RC.numel()),
             "quantize: q must be F32 of x's size");
  Outputs<float> o{q_RC.empty() ? nullptr : q_RC.f32(), codes_RC.u8(),
                   sd == DType::U8 ? scales.u8() : nullptr,
                   sd == DType::F32 ? scales.f32() : nullptr};
  quantize_into(x_RC, fmt, axis, o);
}

void dequantize(const Tensor& codes_RC, const Tensor& scales, Format fmt, BlockAxis axis,
                Tensor& q_RC) {
  MOET_CHECK(is_fp8(fmt), "dequantize needs an FP8 format, got ", format_name(fmt));
  const Grid g = grid_of(codes_RC, fmt, axis);
  MOET_CHECK(codes_RC.dtype == DType::U8 && q_RC.dtype == DType::F32 &&
                 q_RC.numel() == codes_RC.numel() && scales.numel() == g.rows * g.cols,
             "dequantize: codes ", codes_RC.shape_str(), " scales ", scales.shape_str(), " q ",
             q_RC.shape_str());
  const uint8_t* c = codes_RC.u8();
  float* q = q_RC.f32();
  parallel_ranges(g.R, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < g.C; ++j) {
        const int64_t s = axis == BlockAxis::Rows   ? r * g.cols + j / g.b
                          : axis == BlockAxis::Cols ? (r / g.b) * g.cols + j
                                                    : (r / g.b) * g.cols + j / g.b;
        const float scale = fmt == Format::MXFP8 ? e8m0_to_float(scales.u8()[s]) : scales.f32()[s];
        q[r * g.C + j] = e4m3_to_float(c[r * g.C + j]) * scale;
      }
  });
}

int64_t wire_row_bytes(int64_t D, Format fmt) {
  switch (fmt) {
    case Format::F32:
      return 4 * D;
    case Format::BF16:
      return 2 * D;
    case Format::MXFP8:
      return D + (D + 31) / 32;
    case Format::FP8Block:
      return D + 4 * ((D + 127) / 128);
    case Format::NVFP4:
      return (D + 1) / 2 + (D + 15) / 16;
    case Format::MXFP4:
      return (D + 1) / 2 + (D + 31) / 32;
  }
  return 0;
}

void encode_fp4_rows(const Tensor& x_RD, Format fmt, float amax, void* out) {
  OpScope op_scope("wire pack", 0, double(x_RD.bytes()) * 1.15);
  MOET_CHECK(is_fp4(fmt) && x_RD.dtype == DType::F32, "encode_fp4_rows: F32 rows to an FP4 format");
  const int64_t R = rows_of(x_RD), D = x_RD.size(-1), rb = wire_row_bytes(D, fmt);
  const int64_t b = format_block(fmt), nb = (D + b - 1) / b, half = (D + 1) / 2;
  auto* o = static_cast<unsigned char*>(out);
  parallel_ranges_min(
      R, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
        // one row at a time through the quantizer (its rows blocks are within a row; the global
        // scale is the segment's), codes and scales into per-thread scratch
        float* codes = scratch<float>(size_t(D + nb), 15);
        float* scales = codes + D;
        Fp4Options opt;
        opt.global_amax = amax;
        for (int64_t r = r0; r < r1; ++r) {
          const Tensor row(x_RD.f32() + r * D, DType::F32, {1, D});
          quantize_fp4(row, fmt, BlockAxis::Rows,
                       {.values = {},
                        .codes = Tensor(codes, DType::F32, {1, D}),
                        .scales = Tensor(scales, DType::F32, {nb})},
                       opt);
          unsigned char* w = o + r * rb;
          for (int64_t j = 0; j < half; ++j) {
            const uint8_t lo = e2m1_code(codes[2 * j]);
            const uint8_t hi = 2 * j + 1 < D ? e2m1_code(codes[2 * j + 1]) : 0;
            w[j] = uint8_t(lo | (hi << 4));
          }
          for (int64_t k = 0; k < nb; ++k)  // E4M3 values, or powers of two (E8M0: the exponent)
            w[half + k] = fmt == Format::NVFP4
                              ? e4m3_bits(scales[k])
                              : uint8_t((std::bit_cast<uint32_t>(scales[k]) >> 23) & 0xFFu);
        }
      });
}

void encode_rows(const Tensor& x_RD, Format fmt, void* out) {
  OpScope op_scope("wire pack", 0, double(x_RD.bytes()) * 1.5);
  MOET_CHECK(x_RD.dtype == DType::F32, "encode_rows: x must be F32");
  const int64_t R = rows_of(x_RD), D = x_RD.size(-1), rb = wire_row_bytes(D, fmt);
  const float* x = x_RD.f32();
  auto* o = static_cast<unsigned char*>(out);
  if (fmt == Format::F32) return void(std::memcpy(out, x, size_t(R * D) * 4));
  parallel_ranges_min(
      R, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * D;
          unsigned char* w = o + r * rb;
          if (fmt == Format::BF16) {
            f32_to_bf16(xr, reinterpret_cast<uint16_t*>(w), D);  // rows are 2·D bytes: aligned
            continue;
          }
          const int64_t b = format_block(fmt), nb = (D + b - 1) / b;
          for (int64_t k = 0; k < nb; ++k) {
            const BlockScale s =
                block_scale(fmt, block_amax(xr + k * b, std::min(D, (k + 1) * b) - k * b));
            for (int64_t j = k * b; j < std::min(D, (k + 1) * b); ++j)
              w[j] = e4m3_bits(xr[j] * s.mult);
            if (fmt == Format::MXFP8)
              w[D + k] = s.code;
            else
              std::memcpy(w + D + 4 * k, &s.deq, 4);
          }
        }
      });
}

void decode_rows(const void* in, Format fmt, Tensor& x_RD) {
  OpScope op_scope("wire pack", 0, double(x_RD.bytes()) * 1.5);
  MOET_CHECK(x_RD.dtype == DType::F32, "decode_rows: x must be F32");
  const int64_t R = rows_of(x_RD), D = x_RD.size(-1), rb = wire_row_bytes(D, fmt);
  float* x = x_RD.f32();
  const auto* w0 = static_cast<const unsigned char*>(in);
  if (fmt == Format::F32) return void(std::memcpy(x, in, size_t(R * D) * 4));
  parallel_ranges_min(
      R, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const unsigned char* w = w0 + r * rb;
          float* xr = x + r * D;
          if (fmt == Format::BF16) {
            bf16_to_f32(reinterpret_cast<const uint16_t*>(w), xr, D);
            continue;
          }
          const int64_t b = format_block(fmt);
          if (is_fp4(fmt)) {
            const int64_t half = (D + 1) / 2;
            for (int64_t j = 0; j < D; ++j) {
              const uint8_t c = (w[j / 2] >> (4 * (j & 1))) & 0xFu;
              const uint8_t sc = w[half + j / b];
              xr[j] =
                  e2m1_to_float(c) * (fmt == Format::NVFP4 ? e4m3_to_float(sc) : e8m0_to_float(sc));
            }
            continue;
          }
          for (int64_t j = 0; j < D; ++j) {
            float scale;
            if (fmt == Format::MXFP8)
              scale = e8m0_to_float(w[D + j / b]);
            else
              std::memcpy(&scale, w + D + 4 * (j / b), 4);
            xr[j] = e4m3_to_float(w[j]) * scale;
          }
        }
      });
}

}  // namespace moet::ops
