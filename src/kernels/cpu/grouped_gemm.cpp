// grouped_gemm.cpp — the experts' grouped linear layer: one GEMM per non-empty (expert,
// source) segment of contiguous rows, in any precision of kernels/number_format.h.
#include "core/tree_sum.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/fp4_operands.h"
#include "kernels/cpu/operands.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

// Validates offsets (I32, E+1 entries, 0 .. M, non-decreasing); returns E.
int64_t check_offsets(const Tensor& offsets_E1, int64_t M) {
  check_i32(offsets_E1);
  const int64_t E = offsets_E1.numel() - 1;
  MOET_CHECK(E >= 1, "grouped linear: offsets need E+1 >= 2 entries");
  const int32_t* off = offsets_E1.i32();
  MOET_CHECK(off[0] == 0 && off[E] == M, "grouped linear: offsets must run from 0 to M=", M,
             ", got ", off[0], " .. ", off[E]);
  for (int64_t e = 0; e < E; ++e)
    MOET_CHECK(off[e] <= off[e + 1], "grouped linear: offsets decrease at expert ", e);
  return E;
}

// Shapes of one grouped call: M rows, G = E*S segments.
struct Grouped {
  int64_t M, D, O, S, G, E;
};

Grouped check_grouped(const char* what, const Tensor& x_MD, const Tensor& offsets_E1,
                      const Tensor& w_EOD, const Tensor& y_MO, int64_t S) {
  const int64_t M = rows_of(x_MD), D = x_MD.size(-1), O = y_MO.size(-1);
  const int64_t G = check_offsets(offsets_E1, M);
  MOET_CHECK(S >= 1 && G % S == 0, what, ": ", G, " segments for ", S, " per expert");
  const int64_t E = G / S;
  MOET_CHECK(rows_of(y_MO) == M && w_EOD.numel() == E * O * D &&
                 (w_EOD.ndim != 3 || (w_EOD.size(1) == O && w_EOD.size(2) == D)),
             what, ": x ", x_MD.shape_str(), " w ", w_EOD.shape_str(), " y ", y_MO.shape_str(),
             " E=", E);
  return {M, D, O, S, G, E};
}

// The experts' weight operand of one role: prepared, or quantized now into scratch.
Tensor expert_weights(const Tensor& w_EOD, int64_t E, int64_t O, int64_t D, Format f, bool dgrad,
                      const WeightOperands* wq) {
  if (wq) {
    const Tensor& t = dgrad && wq->dgrad.ptr ? wq->dgrad : wq->fprop;
    MOET_ASSERT(t.ptr && t.numel() == E * O * D);
    return t;
  }
  Tensor q = operand_buffer({E, O, D}, kSlotW);
  WeightOperands tmp;
  (dgrad ? tmp.dgrad : tmp.fprop) = q;
  LinearPrecision p;
  (dgrad ? p.dgrad : p.fprop) = f;
  if (dgrad) p.fprop = Format::F32;
  prepare_weight(Tensor(w_EOD.ptr, DType::F32, {E, O, D}), p, tmp);
  return q;
}

// Runs fn(s) for every non-empty segment s, segments spread over the threads (each GEMM on one
// thread, single-threaded inside: small and uneven experts keep both cores busy, and a
// segment's result does not depend on the thread count).
template <typename Fn>
void for_each_segment(int64_t G, const int32_t* off, Fn&& fn) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t s = 0; s < G; ++s)
    if (off[s + 1] > off[s]) fn(s);
}

// Quantizes the rows of each non-empty segment with b×1 blocks that start at its first row.
void quantize_segments_cols(const Tensor& x_MD, const int32_t* off, int64_t G, Format f,
                            Tensor& q_MD) {
  const int64_t D = x_MD.size(-1);
  const size_t es = dtype_size(q_MD.dtype);
  for_each_segment(G, off, [&](int64_t g) {
    const int64_t r0 = off[g], r = off[g + 1] - off[g];
    const Tensor xs(x_MD.data<float>() + r0 * D, DType::F32, {r, D});
    Tensor qs(static_cast<char*>(q_MD.ptr) + r0 * D * es, q_MD.dtype, {r, D});
    quantize(xs, f, BlockAxis::Cols, qs);
  });
}

// A producer-made operand copy t of q in format f ([M, cols] in the operand dtype), or empty.
Tensor made(const Operand* q, const Tensor& t, Format f, int64_t numel) {
  if (!q || t.empty()) return {};
  MOET_ASSERT(q->fmt == f && t.numel() == numel && t.dtype == gemm_operand_dtype());
  return t;
}

// FP4 (fp4_operands.h): each non-empty segment's rows of x_MD (F32 or BF16 bits, C columns)
// quantized on its own in `role` (a global scale per segment, so an expert's rows from one source
// are quantized alike under every layout) into out at row `row0[s]`; returns the amaxes.
// amax: G entries (scratch of the caller's, as every array of these helpers: no allocation in a
// step once warm). dequant_amax (G entries, or null): x holds dispatched FP4 values, each
// segment's dequantized first with the global decode scale of its amax.
void fp4_segments(const Tensor& x, const int32_t* off, int64_t G, Format f, Fp4Role role,
                  const Fp4Key* keys, const int64_t* row0, const Tensor& out, float* amax,
                  const float* dequant_amax = nullptr) {
  std::fill_n(amax, G, 0.0f);
  const int64_t C = x.size(-1);
  const size_t xs = dtype_size(x.dtype), os = dtype_size(out.dtype);
  // segments over the threads, each quantized on one (the quantizer's bits do not depend on it)
#pragma omp parallel for schedule(dynamic, 1) if (G > 1)
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r = off[g + 1] - off[g];
    if (r == 0) continue;
    const float prescale =
        dequant_amax && f == Format::NVFP4 ? nvfp4_global_decode(dequant_amax[g]) : 1.0f;
    amax[g] = fp4_operand(static_cast<const char*>(x.ptr) + size_t(off[g] * C) * xs, x.dtype, r, C,
                          f, role, keys ? keys[g] : Fp4Key{},
                          static_cast<char*>(out.ptr) + size_t(row0[g] * C) * os, prescale);
  }
}

// The segments' own first rows (offsets), or FP4 wgrad's padded ones.
// (G + 1 entries in scratch slot 12 or, padded, 13.)
const int64_t* segment_rows0(const int32_t* off, int64_t G, bool padded) {
  int64_t* r0 = scratch<int64_t>(size_t(G) + 1, padded ? 13 : 12);
  r0[0] = 0;
  for (int64_t g = 0; g < G; ++g)
    r0[g + 1] = r0[g] + (padded ? fp4_wgrad_rows(off[g + 1] - off[g]) : off[g + 1] - off[g]);
  return r0;
}

// The FP4 grouped forward: x's segments quantized (or as the dispatch quantized them), one GEMM
// per segment scaled by its alpha.
void fp4_grouped_forward(const Grouped& g, const Tensor& x_MD, const int32_t* off,
                         const Tensor& w_EOD, Tensor& y_MO, const GroupedLinearOptions& o) {
  const Format f = o.precision.fprop;
  MOET_CHECK(y_MO.dtype == DType::F32 && (x_MD.dtype == DType::F32 || x_MD.dtype == DType::BF16),
             "an FP4 grouped linear needs F32 tensors");
  const int64_t D = g.D, O = g.O;
  Tensor xq = x_MD;
  const float* ax = o.x_fp4_amax;
  if (!ax) {
    xq = operand_buffer({g.M, D}, kSlotX);
    float* a = scratch<float>(size_t(g.G), 12);
    fp4_segments(x_MD, off, g.G, f, Fp4Role::FpropX, nullptr, segment_rows0(off, g.G, false), xq,
                 a);
    ax = a;
  } else if (x_MD.dtype != gemm_operand_dtype()) {  // the values, exact in either dtype
    xq = operand_buffer({g.M, D}, kSlotX);
    if (x_MD.dtype == DType::F32)
      f32_to_bf16(x_MD.f32(), static_cast<uint16_t*>(xq.ptr), g.M * D);
    else
      bf16_to_f32(static_cast<const uint16_t*>(x_MD.ptr), xq.f32(), g.M * D);
  }
  const Fp4Weight w = fp4_weight(w_EOD, g.E, O, D, f, false, o.wq);
  for_each_segment(g.G, off, [&](int64_t s) {
    const int64_t r0 = off[s], r = off[s + 1] - off[s], e = s / g.S;
    gemm_operands(false, true, r, O, D, fp4_alpha(f, ax[s], w.amax[e]), xq, r0 * D, D, w.values,
                  e * O * D, D, 0.0f, y_MO.f32() + r0 * O, O);
    if (o.y_format == Format::BF16) round_bf16_f32(y_MO.f32() + r0 * O, y_MO.f32() + r0 * O, r * O);
  });
}

}  // namespace

void grouped_linear_forward(const Tensor& x_MD, const Tensor& offsets_E1, const Tensor& w_EOD,
                            Tensor& y_MO, const GroupedLinearOptions& o) {
  const Grouped g =
      check_grouped("grouped linear", x_MD, offsets_E1, w_EOD, y_MO, o.segments_per_expert);
  const LinearPrecision& p = o.precision;
  const bool x_in_format = o.x_in_format;
  const Format y_format = o.y_format;
  // bf16 bits of the values (FP4 quantizes them as they are)
  const bool x_bits = (x_in_format || is_fp4(p.fprop)) && x_MD.dtype == DType::BF16;
  if (!x_bits) check_dtype(y_MO.dtype, {&x_MD});
  check_dtype(y_MO.dtype, {&w_EOD});
  MOET_CHECK(y_format == Format::F32 || (y_format == Format::BF16 && y_MO.dtype == DType::F32),
             "grouped linear: outputs rounded to ", format_name(y_format));
  const int32_t* off = offsets_E1.i32();
  const int64_t D = g.D, O = g.O;
  OpScope op_scope("expert GEMM fprop", 2.0 * double(g.M) * double(O) * double(D));
  if (is_fp4(p.fprop)) return fp4_grouped_forward(g, x_MD, off, w_EOD, y_MO, o);
  // the bf16 epilogue: a segment's outputs rounded while they are in cache
  auto epilogue = [&](int64_t r0, int64_t r) {
    if (y_format == Format::BF16) round_bf16_f32(y_MO.f32() + r0 * O, y_MO.f32() + r0 * O, r * O);
  };
  if (p.fprop != Format::F32) {
    MOET_CHECK(y_MO.dtype == DType::F32, "low-precision grouped linear needs F32 tensors");
    // made by x's producer, or x itself when it holds the values in the operand dtype
    Tensor xq = made(o.xq, o.xq ? o.xq->rows : Tensor{}, p.fprop, g.M * D);
    if (xq.empty() && x_in_format && x_MD.dtype == gemm_operand_dtype()) xq = x_MD;
    if (xq.empty()) {
      MOET_CHECK(!x_bits, "grouped linear: bf16 x for fp32 operands");
      xq = operand_buffer({g.M, D}, kSlotX);
      quantize(x_MD, x_in_format ? Format::F32 : p.fprop, BlockAxis::Rows, xq);
    }
    const Tensor w = expert_weights(w_EOD, g.E, O, D, p.fprop, false, o.wq);
    for_each_segment(g.G, off, [&](int64_t s) {
      const int64_t r0 = off[s], r = off[s + 1] - off[s], e = s / g.S;
      gemm_operands(false, true, r, O, D, 1.0f, xq, r0 * D, D, w, e * O * D, D, 0.0f,
                    y_MO.f32() + r0 * O, O);
      epilogue(r0, r);
    });
    return;
  }
  MOET_CHECK(!x_bits, "grouped linear: bf16 x in an fp32 layer");
  dispatch_float(y_MO.dtype, [&](auto t0) {
    using T = decltype(t0);
    for_each_segment(g.G, off, [&](int64_t s) {
      const int64_t r0 = off[s], r = off[s + 1] - off[s], e = s / g.S;
      blas_gemm(false, true, r, O, D, T(1), x_MD.data<T>() + r0 * D, D, w_EOD.data<T>() + e * O * D,
                D, T(0), y_MO.data<T>() + r0 * O, O);
      if constexpr (std::is_same_v<T, float>) epilogue(r0, r);
    });
  });
}

namespace {

// dgrad: dx = dy · w[e] per segment, one GEMM each (overwrite).
void grouped_dgrad(const Grouped& g, const Tensor& dy_MO, const int32_t* off, const Tensor& w_EOD,
                   Tensor& dx_MD, const GroupedLinearOptions& o, const Fp4Key* keys) {
  const int64_t D = g.D, O = g.O, S = g.S;
  const Format f = o.precision.dgrad;
  if (f == Format::F32) {
    dispatch_float(dy_MO.dtype, [&](auto t0) {
      using T = decltype(t0);
      for_each_segment(g.G, off, [&](int64_t s) {
        const int64_t r0 = off[s], r = off[s + 1] - off[s], e = s / S;
        blas_gemm(false, false, r, D, O, T(1), dy_MO.data<T>() + r0 * O, O,
                  w_EOD.data<T>() + e * O * D, D, T(0), dx_MD.data<T>() + r0 * D, D);
      });
    });
    return;
  }
  if (is_fp4(f)) {
    const Tensor dyq = operand_buffer({g.M, O}, kSlotDy);
    float* ady = scratch<float>(size_t(g.G), 12);
    fp4_segments(dy_MO, off, g.G, f, Fp4Role::DgradDy, keys, segment_rows0(off, g.G, false), dyq,
                 ady);
    const Fp4Weight w = fp4_weight(w_EOD, g.E, O, D, f, true, o.wq);
    for_each_segment(g.G, off, [&](int64_t s) {
      const int64_t r0 = off[s], e = s / S;
      gemm_operands(false, false, off[s + 1] - r0, D, O, fp4_alpha(f, ady[s], w.amax[e]), dyq,
                    r0 * O, O, w.values, e * O * D, D, 0.0f, dx_MD.f32() + r0 * D, D);
    });
    return;
  }
  Tensor dyq = made(o.dyq, o.dyq ? o.dyq->rows : Tensor{}, f, g.M * O);
  if (dyq.empty()) {
    dyq = operand_buffer({g.M, O}, kSlotDy);
    quantize(dy_MO, f, BlockAxis::Rows, dyq);
  }
  const Tensor w = expert_weights(w_EOD, g.E, O, D, f, true, o.wq);
  for_each_segment(g.G, off, [&](int64_t s) {
    const int64_t r0 = off[s], r = off[s + 1] - off[s], e = s / S;
    gemm_operands(false, false, r, D, O, 1.0f, dyq, r0 * O, O, w, e * O * D, D, 0.0f,
                  dx_MD.f32() + r0 * D, D);
  });
}

// What the wgrad GEMMs multiply: the segments' rows of dy and x in b×1 blocks, made by their
// producers or quantized here (x's bf16 bits as they are, in an element-wise format), or the
// tensors themselves in fp32.
struct WgradOperands {
  Tensor dy, x;
  // FP4: segment s's rows start at row0[s] of dy and x and run row0[s + 1] - row0[s] (padded to
  // 16), and its GEMM's sum is scaled by alpha[s]; null: the segments' own rows, alpha 1.
  const int64_t* row0 = nullptr;
  const float* alpha = nullptr;
};

WgradOperands wgrad_operands(const Grouped& g, const Tensor& dy_MO, const Tensor& x_MD,
                             const int32_t* off, const GroupedLinearOptions& o,
                             const Fp4Key* keys) {
  const Format f = o.precision.wgrad;
  if (f == Format::F32) return {dy_MO, x_MD, nullptr, nullptr};
  WgradOperands q;
  if (is_fp4(f)) {
    q.row0 = segment_rows0(off, g.G, true);
    const int64_t P = q.row0[g.G];
    q.dy = operand_buffer({P, g.O}, kSlotDy);
    q.x = operand_buffer({P, g.D}, kSlotX);
    float* ady = scratch<float>(size_t(g.G), 13);
    float* ax = scratch<float>(size_t(g.G), 14);
    fp4_segments(dy_MO, off, g.G, f, Fp4Role::WgradDy, keys, q.row0, q.dy, ady);
    fp4_segments(x_MD, off, g.G, f, Fp4Role::WgradX, keys, q.row0, q.x, ax, o.x_fp4_amax);
    for (int64_t s = 0; s < g.G; ++s) ax[s] = fp4_alpha(f, ady[s], ax[s]);  // now the alphas
    q.alpha = ax;
    return q;
  }
  q.dy = made(o.dyq, o.dyq ? o.dyq->wgrad() : Tensor{}, f, g.M * g.O);
  if (q.dy.empty()) {
    q.dy = operand_buffer({g.M, g.O}, kSlotDy);
    quantize_segments_cols(dy_MO, off, g.G, f, q.dy);
  }
  q.x = made(o.xq, o.xq ? o.xq->wgrad() : Tensor{}, f, g.M * g.D);
  if (q.x.empty() && x_MD.dtype == DType::BF16 && gemm_operand_dtype() == DType::BF16) q.x = x_MD;
  if (q.x.empty()) {
    q.x = operand_buffer({g.M, g.D}, kSlotX);
    quantize_segments_cols(x_MD, off, g.G, f, q.x);
  }
  return q;
}

// Weight gradients: one GEMM per segment; with several segments per expert (one per source
// rank under expert parallelism) the segments' gradients are summed in the canonical tree
// order, so the result does not depend on how experts are spread over ranks — or, into a
// [S, E, O, D] dw (apart), each added into its own slice by the very call a single segment gets
// (--deterministic adds them later, in one process's order over sequences).
void grouped_wgrad(const Grouped& g, const Tensor& dy_MO, const Tensor& x_MD, const int32_t* off,
                   const WgradOperands& q, bool apart, Tensor& dw_EOD) {
  const int64_t D = g.D, O = g.O, S = g.S;
  dispatch_float(dy_MO.dtype, [&](auto t0) {
    using T = decltype(t0);
    auto segment_grad = [&](int64_t s, T* out, T beta) {
      const int64_t r0 = off[s], r = off[s + 1] - off[s];
      if (r == 0) {
        if (beta == T(0)) std::fill_n(out, O * D, T(0));
        return;
      }
      if constexpr (std::is_same_v<T, float>) {
        const bool fp4 = q.row0 != nullptr;
        const int64_t k0 = fp4 ? q.row0[s] : r0, k = fp4 ? q.row0[s + 1] - k0 : r;
        gemm_operands(true, false, O, D, k, fp4 ? q.alpha[s] : 1.0f, q.dy, k0 * O, O, q.x, k0 * D,
                      D, beta, out, D);
      } else {
        blas_gemm(true, false, O, D, r, T(1), dy_MO.data<T>() + r0 * O, O, x_MD.data<T>() + r0 * D,
                  D, beta, out, D);
      }
    };
    // experts over the threads, each expert's segments and their tree sum on one thread
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < g.E; ++e) {
      T* dw = dw_EOD.data<T>() + e * O * D;
      if (S == 1 || apart) {  // segment s into slice s (an empty segment adds nothing)
        for (int64_t s = 0; s < S; ++s) segment_grad(e * S + s, dw + s * g.E * O * D, T(1));
        continue;
      }
      T* part = scratch<T>(size_t(S * O * D), 2);  // this thread's
      for (int64_t s = 0; s < S; ++s) segment_grad(e * S + s, part + s * O * D, T(0));
      tree_sum_arrays(part, S, O * D);  // part[0] = canonical sum of the S parts
      const T* sum = part;
      for (int64_t i = 0; i < O * D; ++i) dw[i] += sum[i];
    }
  });
}

}  // namespace

void grouped_linear_backward(const Tensor& dy_MO, const Tensor& x_MD, const Tensor& offsets_E1,
                             const Tensor& w_EOD, Tensor& dx_MD, Tensor& dw_EOD,
                             const GroupedLinearOptions& o) {
  const Grouped g =
      check_grouped("grouped linear bwd", x_MD, offsets_E1, w_EOD, dy_MO, o.segments_per_expert);
  MOET_CHECK(dx_MD.empty() || dx_MD.numel() == g.M * g.D, "grouped linear bwd dx ",
             dx_MD.shape_str());
  // dw [S, E, O, D]: the segments' gradients kept apart (one slice per source rank)
  const bool apart = dw_EOD.ndim == 4;
  MOET_CHECK(dw_EOD.empty() || (dw_EOD.numel() == (apart ? g.S : 1) * g.E * g.O * g.D &&
                                (!apart || dw_EOD.size(0) == g.S)),
             "grouped linear bwd dw ", dw_EOD.shape_str(), " for E=", g.E, " S=", g.S);
  const LinearPrecision& p = o.precision;
  // x as bf16 bits: the expert rows of a bf16 dispatch (element-wise wgrad: they are its operand)
  const bool x_bits = x_MD.dtype == DType::BF16;
  MOET_CHECK(!x_bits || (!is_fp8(p.wgrad) && p.wgrad != Format::F32) || o.xq,
             "grouped linear bwd: bf16 x needs its wgrad operand");
  check_dtype(dy_MO.dtype, {&w_EOD, &dx_MD, &dw_EOD});
  if (!x_bits) check_dtype(dy_MO.dtype, {&x_MD});
  const int32_t* off = offsets_E1.i32();
  const bool low = p.dgrad != Format::F32 || p.wgrad != Format::F32;
  MOET_CHECK(!low || dy_MO.dtype == DType::F32, "low-precision grouped linear needs F32 tensors");
  const double flops = 2.0 * double(g.M) * double(g.O) * double(g.D);
  // FP4: each segment's random streams keyed by its weight and its rows of x
  Fp4Key* keys = nullptr;
  if (is_fp4(p.dgrad) || is_fp4(p.wgrad)) {
    MOET_CHECK(p.fprop == p.dgrad && p.dgrad == p.wgrad,
               "an FP4 grouped linear takes one format in all three GEMMs");
    keys = scratch<Fp4Key>(size_t(g.G), 12);
    const size_t row_bytes = size_t(g.D) * dtype_size(x_MD.dtype);
    for (int64_t s = 0; s < g.G; ++s)
      keys[size_t(s)] =
          fp4_key(o.wq, static_cast<const char*>(x_MD.ptr) + size_t(off[s]) * row_bytes, x_MD.dtype,
                  int64_t(off[s + 1] - off[s]) * g.D);
  }
  if (!dx_MD.empty()) {
    OpScope op_scope("expert GEMM dgrad", flops);
    grouped_dgrad(g, dy_MO, off, w_EOD, dx_MD, o, keys);
  }
  if (dw_EOD.empty()) return;
  OpScope op_scope("expert GEMM wgrad", flops);
  grouped_wgrad(g, dy_MO, x_MD, off, wgrad_operands(g, dy_MO, x_MD, off, o, keys), apart, dw_EOD);
}

}  // namespace moet::ops
