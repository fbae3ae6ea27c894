// fp4_operands.cpp — the GEMM operands of the recipes nvfp4 and mxfp4 (fp4_operands.h), and the
// step context of their stochastic rounding and random Hadamard transform.
#include "kernels/cpu/fp4_operands.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "core/crc32c.h"
#include "core/rng.h"
#include "kernels/cpu/convert.h"
#include "kernels/profile.h"

namespace moet::ops {

namespace {

// Tags that keep the random streams of the context apart from every other use of the seed.
constexpr uint64_t kSignsTag = 0x4E56465034524854ull;  // "NVFP4RHT"
constexpr uint64_t kRoundTag = 0x4E5646503453524Eull;  // "NVFP4SRN"

struct Fp4StepState {
  std::atomic<uint64_t> seed{0};
  std::atomic<int64_t> step{0};
  std::array<std::atomic<float>, 16> signs;
  Fp4StepState() {
    for (int i = 0; i < 16; ++i) signs[size_t(i)].store(kHadamardSignsTE[i]);
  }
};

Fp4StepState& step_state() {
  static Fp4StepState s;
  return s;
}

}  // namespace

void fp4_step_signs(uint64_t seed, int64_t step, float signs[16]) {
  const CounterRng rng(seed, stream_id({kSignsTag, uint64_t(step)}));
  const uint32_t bits = rng.u32(0);
  for (int i = 0; i < 16; ++i) signs[i] = (bits >> i) & 1u ? -1.0f : 1.0f;
}

void set_fp4_step(uint64_t seed, int64_t step) {
  Fp4StepState& s = step_state();
  float v[16];
  fp4_step_signs(seed, step, v);
  for (int i = 0; i < 16; ++i) s.signs[size_t(i)].store(v[i]);
  s.seed.store(seed);
  s.step.store(step);
}

void quantize_fp4_segments(Tensor& x_MD, const int32_t* off, int64_t G, Format f, float* amax) {
  MOET_CHECK(is_fp4(f) && (x_MD.dtype == DType::F32 || x_MD.dtype == DType::BF16),
             "quantize_fp4_segments: F32 or BF16 rows to an FP4 format");
  std::fill_n(amax, G, 0.0f);
  const int64_t C = x_MD.size(-1);
  const size_t xs = dtype_size(x_MD.dtype);
  constexpr int64_t kRows = 256;  // staged at a time: a scratch of one size (nothing grows)
  // segments over the threads, each quantized on one, exactly as the experts' fprop operand of a
  // segment (cpu::fp4_operand, FpropX): rows blocks need only the segment's amax beside the row
#pragma omp parallel for schedule(dynamic, 1) if (G > 1)
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r = off[g + 1] - off[g];
    if (r == 0) continue;
    char* rows = static_cast<char*>(x_MD.ptr) + size_t(off[g] * C) * xs;
    float* staged = cpu::scratch<float>(size_t(kRows * C), 15);
    auto stage = [&](int64_t i0, int64_t n) {  // rows [i0, i0 + n) as fp32 (the values overwrite)
      if (x_MD.dtype == DType::BF16)
        cpu::bf16_to_f32(reinterpret_cast<const uint16_t*>(rows) + i0 * C, staged, n * C);
      else
        std::memcpy(staged, reinterpret_cast<const float*>(rows) + i0 * C,
                    size_t(n * C) * sizeof(float));
      return Tensor(staged, DType::F32, {n, C});
    };
    Fp4Options o;
    if (f == Format::NVFP4) {
      float a = 0.0f;
      for (int64_t i0 = 0; i0 < r; i0 += kRows)
        a = std::max(a, fp4_amax(stage(i0, std::min(kRows, r - i0)), BlockAxis::Rows));
      o.global_amax = amax[g] = a;
    }
    for (int64_t i0 = 0; i0 < r; i0 += kRows) {
      const int64_t n = std::min(kRows, r - i0);
      const Tensor values(rows + size_t(i0 * C) * xs, x_MD.dtype, {n, C});
      quantize_fp4(stage(i0, n), f, BlockAxis::Rows, {.values = values, .codes = {}, .scales = {}},
                   o);
    }
  }
}

namespace cpu {

Fp4Key fp4_key(const WeightOperands* wq, const void* x, DType dtype, int64_t n) {
  Fp4Key k{wq ? wq->key : 0, 0};
  if (!x || n == 0) return k;
  if (dtype == DType::F32) {
    k.rows = crc32c(x, size_t(n) * sizeof(float));
    return k;
  }
  MOET_ASSERT(dtype == DType::BF16);
  constexpr int64_t kChunk = 1024;
  float wide[kChunk];
  const uint16_t* b = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    bf16_to_f32(b + i, wide, m);
    k.rows = crc32c(wide, size_t(m) * sizeof(float), k.rows);
  }
  return k;
}

float fp4_operand(const void* src, DType src_dtype, int64_t r, int64_t C, Format f, Fp4Role role,
                  const Fp4Key& key, void* out, float prescale) {
  MOET_ASSERT(is_fp4(f) && (src_dtype == DType::F32 || src_dtype == DType::BF16));
  const bool wgrad = role == Fp4Role::WgradDy || role == Fp4Role::WgradX;
  const bool grad = role == Fp4Role::DgradDy || role == Fp4Role::WgradDy;
  const int64_t rows = wgrad ? fp4_wgrad_rows(r) : r;
  const Tensor values(out, gemm_operand_dtype(), {rows, C});
  if (rows == 0 || C == 0) return 0.0f;
  const Fp4StepState& s = step_state();
  float signs[16];
  for (int i = 0; i < 16; ++i) signs[i] = s.signs[size_t(i)].load();
  const bool transform = wgrad && f == Format::NVFP4;
  // the source as fp32 rows, zero-padded for wgrad and transformed (a view of src where nothing
  // changes); quantizing the transformed rows is quantizing with the transform. An fp32 source's
  // whole 16-row groups are transformed as they are copied (one pass); the rest is copied, then
  // padded and transformed in place.
  const float* x = static_cast<const float*>(src);
  if (src_dtype == DType::BF16 || rows != r || transform || prescale != 1.0f) {
    float* staged = scratch<float>(size_t(rows * C), 10);
    const bool fused = transform && src_dtype == DType::F32 && prescale == 1.0f;
    const int64_t done = fused ? r / 16 * 16 : 0;  // rows already transformed into staged
    if (done > 0) {
      Tensor into(staged, DType::F32, {done, C});
      hadamard16(Tensor(const_cast<void*>(src), DType::F32, {done, C}), BlockAxis::Cols, signs,
                 into);
    }
    if (src_dtype == DType::BF16)
      bf16_to_f32(static_cast<const uint16_t*>(src), staged, r * C);
    else if (done < r)
      std::memcpy(staged + done * C, static_cast<const float*>(src) + done * C,
                  size_t((r - done) * C) * sizeof(float));
    if (prescale != 1.0f)
      for (int64_t i = 0; i < r * C; ++i) staged[i] *= prescale;
    std::fill(staged + r * C, staged + rows * C, 0.0f);
    if (transform && done < rows) {
      Tensor rest(staged + done * C, DType::F32, {rows - done, C});
      hadamard16(rest, BlockAxis::Cols, signs, rest);
    }
    x = staged;
  }
  Fp4Options o;
  o.stochastic = grad;
  o.seed = s.seed.load();
  o.stream = stream_id({kRoundTag, uint64_t(s.step.load()), key.weight, key.rows, uint64_t(role)});
  const Tensor xt(const_cast<float*>(x), DType::F32, {rows, C});
  const Fp4Result res = quantize_fp4(xt, f, wgrad ? BlockAxis::Cols : BlockAxis::Rows,
                                     {.values = values, .codes = {}, .scales = {}}, o);
  return f == Format::NVFP4 ? res.amax : 0.0f;
}

void fp4_prepare_weight(const Tensor& w, const LinearPrecision& p, WeightOperands& wq) {
  const Format f = p.fprop;
  MOET_CHECK(p.dgrad == f && p.wgrad == f, "an FP4 linear takes one format in all three GEMMs");
  const int64_t E = w.ndim == 3 ? w.size(0) : 1, O = w.size(-2), D = w.size(-1);
  wq.amax.assign(size_t(E), 0.0f);
  const size_t es = dtype_size(gemm_operand_dtype());
  for (int64_t e = 0; e < E; ++e) {
    const Tensor we(w.f32() + e * O * D, DType::F32, {O, D});
    auto at = [&](const Tensor& t) {
      return Tensor(static_cast<char*>(t.ptr) + size_t(e * O * D) * es, t.dtype, {O, D});
    };
    if (f == Format::NVFP4) {
      wq.amax[size_t(e)] = quantize_fp4(we, f, BlockAxis::Square,
                                        {.values = at(wq.fprop), .codes = {}, .scales = {}})
                               .amax;
      continue;
    }
    quantize_fp4(we, f, BlockAxis::Rows, {.values = at(wq.fprop), .codes = {}, .scales = {}});
    if (!wq.dgrad.empty())
      quantize_fp4(we, f, BlockAxis::Cols, {.values = at(wq.dgrad), .codes = {}, .scales = {}});
  }
}

Fp4Weight fp4_weight(const Tensor& w_EOD, int64_t E, int64_t O, int64_t D, Format f, bool dgrad,
                     const WeightOperands* wq) {
  if (wq) {
    const Tensor& t = dgrad && wq->dgrad.ptr ? wq->dgrad : wq->fprop;
    MOET_ASSERT(t.ptr && t.numel() == E * O * D && wq->amax.size() == size_t(E));
    return {t, wq->amax.data()};
  }
  // made now: one role's copy in scratch (the amax with it, per thread)
  static thread_local WeightOperands made;
  const DType dt = gemm_operand_dtype();
  const size_t n = size_t(E * O * D);
  void* p = dt == DType::BF16 ? static_cast<void*>(scratch<uint16_t>(n, 11))
                              : static_cast<void*>(scratch<float>(n, 11));
  made.fprop = Tensor(p, dt, {E, O, D});
  made.dgrad = {};
  LinearPrecision one = LinearPrecision::all(f);
  const Tensor w(w_EOD.ptr, DType::F32, {E, O, D});
  if (f == Format::MXFP4 && dgrad) {
    // the cols copy alone, written where fprop's would be
    made.amax.assign(size_t(E), 0.0f);
    for (int64_t e = 0; e < E; ++e)
      quantize_fp4(
          Tensor(w.f32() + e * O * D, DType::F32, {O, D}), f, BlockAxis::Cols,
          {.values = Tensor(static_cast<char*>(p) + size_t(e * O * D) * dtype_size(dt), dt, {O, D}),
           .codes = {},
           .scales = {}});
  } else {
    fp4_prepare_weight(w, one, made);
  }
  return {made.fprop, made.amax.data()};
}

}  // namespace cpu
}  // namespace moet::ops
