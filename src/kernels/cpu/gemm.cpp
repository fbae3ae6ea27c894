// gemm.cpp — matrix products: gemm, the linear layer (HF [out, in] weights) in any precision of
// kernels/number_format.h, and the weights' low-precision operand copies.
#include "kernels/cpu/emit.h"
#include "kernels/cpu/fp4_operands.h"
#include "kernels/cpu/operands.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {
double gemm_flops(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  const double M = double(trans_a ? a.size(1) : a.size(0)),
               K = double(trans_a ? a.size(0) : a.size(1));
  return 2.0 * M * K * double(trans_b ? b.size(0) : b.size(1));
}
}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha,
          double beta) {
  OpScope op_scope("GEMM (other)", gemm_flops(a, trans_a, b, trans_b), 0);
  MOET_CHECK(a.ndim == 2 && b.ndim == 2 && c.ndim == 2, "gemm needs 2-D tensors, got ",
             a.shape_str(), " ", b.shape_str(), " ", c.shape_str());
  const int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  const int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  MOET_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "gemm shapes: op(a) ", M, "x", K,
             ", op(b) ", Kb, "x", N, ", c ", c.shape_str());
  if (a.dtype == DType::BF16) {
    MOET_CHECK(b.dtype == DType::BF16 && c.dtype == DType::F32,
               "gemm: BF16 operands need a BF16 partner and an F32 result");
    return gemm_operands(trans_a, trans_b, M, N, K, float(alpha), a, 0, a.size(1), b, 0, b.size(1),
                         float(beta), c.f32(), N);
  }
  check_dtype(c.dtype, {&a, &b});
  dispatch_float(c.dtype, [&](auto t0) {
    using T = decltype(t0);
    blas_gemm(trans_a, trans_b, M, N, K, T(alpha), a.data<T>(), a.size(1), b.data<T>(), b.size(1),
              T(beta), c.data<T>(), N);
  });
}

bool weight_dgrad_separate(const LinearPrecision& p) {
  const bool directed = p.dgrad == Format::MXFP8 || p.dgrad == Format::MXFP4;
  return p.dgrad != Format::F32 && !(p.dgrad == p.fprop && !directed);
}

void prepare_weight(const Tensor& w, const LinearPrecision& p, WeightOperands& wq) {
  const bool both = weight_dgrad_separate(p);
  OpScope op_scope("weight operands", 0,
                   double(w.bytes() + wq.fprop.bytes() + (both ? wq.dgrad.bytes() : 0)));
  MOET_CHECK(w.dtype == DType::F32 && (w.ndim == 2 || w.ndim == 3), "prepare_weight: w ",
             w.shape_str());
  const int64_t E = w.ndim == 3 ? w.size(0) : 1, O = w.size(-2), D = w.size(-1);
  for (const Tensor* dst : {&wq.fprop, &wq.dgrad})
    MOET_CHECK(dst->empty() || (dst->numel() == w.numel() && dst->dtype == gemm_operand_dtype()),
               "prepare_weight: operand ", dst->shape_str(), " for weight ", w.shape_str());
  if (p.fprop == Format::F32 && !both) return;
  if (is_fp4(p.fprop)) return fp4_prepare_weight(w, p, wq);
  const size_t es = dtype_size(gemm_operand_dtype());
  // One read of each expert's matrix for both copies where MXFP8 wants two (fprop's blocks along
  // D are the rows copy, dgrad's along O the cols copy: the producer-operand pair of emit.h);
  // each expert blocked on its own, the experts over the threads.
  auto expert = [&](int64_t e) {
    const float* we = w.f32() + e * O * D;
    auto at = [&](const Tensor& t) { return static_cast<char*>(t.ptr) + size_t(e * O * D) * es; };
    if (both && p.fprop == p.dgrad && p.fprop == Format::MXFP8) {
      Operand q;
      q.fmt = Format::MXFP8;
      q.rows = Tensor(at(wq.fprop), wq.fprop.dtype, {O, D});
      q.cols = Tensor(at(wq.dgrad), wq.dgrad.dtype, {O, D});
      emit_all(q, we, O, D);  // chunks of whole 32-row blocks, in cache
      return;
    }
    if (p.fprop != Format::F32)
      quantize_span(we, O, D, p.fprop, weight_axis(p.fprop, false), at(wq.fprop), wq.fprop.dtype);
    if (both)
      quantize_span(we, O, D, p.dgrad, weight_axis(p.dgrad, true), at(wq.dgrad), wq.dgrad.dtype);
  };
  parallel_ranges_min(E, std::max<int64_t>(1, kParallelMin / std::max<int64_t>(O * D, 1)),
                      [&](int64_t e0, int64_t e1) {
                        for (int64_t e = e0; e < e1; ++e) expert(e);
                      });
}

namespace {

// The weight operand of one role: prepared, or quantized now into scratch.
Tensor weight_operand(const Tensor& w_OD, Format f, bool dgrad, const WeightOperands* wq) {
  if (wq) {
    const Tensor& t = dgrad && wq->dgrad.ptr ? wq->dgrad : wq->fprop;
    MOET_ASSERT(t.ptr && t.numel() == w_OD.numel());
    return t;
  }
  Tensor q = operand_buffer({w_OD.size(0), w_OD.size(1)}, kSlotW);
  quantize(w_OD, f, weight_axis(f, dgrad), q);
  return q;
}

// A producer-made operand of one role, or an empty tensor when there is none: the copy `t` of q
// when q is in format f (checked: a mismatch is a bug of the layer that planned it).
Tensor made_operand(const Operand* q, const Tensor& t, Format f, int64_t numel) {
  if (!q || t.empty()) return {};
  MOET_ASSERT(q->fmt == f && t.numel() == numel && t.dtype == gemm_operand_dtype());
  return t;
}

// The linear layer with FP4 operands (fp4_operands.h): every operand quantized here (no producer
// makes FP4 operands), each GEMM's sum scaled by its operands' alpha.
void fp4_linear_forward(const Tensor& x_ND, const Tensor& w_OD, Tensor& y_NO,
                        const LinearOptions& o) {
  const int64_t O = w_OD.size(0), D = w_OD.size(1), N = rows_of(x_ND);
  const Format f = o.precision.fprop;
  MOET_CHECK(y_NO.dtype == DType::F32 && x_ND.dtype == DType::F32,
             "an FP4 linear needs F32 tensors");
  const Tensor x = operand_buffer({N, D}, kSlotX);
  const float ax = fp4_operand(x_ND.ptr, DType::F32, N, D, f, Fp4Role::FpropX, {}, x.ptr);
  const Fp4Weight w = fp4_weight(w_OD, 1, O, D, f, false, o.wq);
  gemm_operands(false, true, N, O, D, fp4_alpha(f, ax, w.amax[0]), x, 0, D, w.values, 0, D,
                o.accumulate ? 1.0f : 0.0f, y_NO.f32(), O);
}

void fp4_linear_backward(const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND,
                         Tensor& dw_OD, const LinearOptions& o) {
  const int64_t O = w_OD.size(0), D = w_OD.size(1), N = rows_of(x_ND);
  const Format f = o.precision.wgrad;
  MOET_CHECK(o.precision.dgrad == f && o.precision.fprop == f,
             "an FP4 linear takes one format in all three GEMMs");
  MOET_CHECK(dy_NO.dtype == DType::F32 && x_ND.dtype == DType::F32 && !x_ND.empty(),
             "an FP4 linear needs F32 tensors");
  const Fp4Key key = fp4_key(o.wq, x_ND.ptr, DType::F32, x_ND.numel());
  const double flops = 2.0 * double(N) * double(O) * double(D);
  if (!dx_ND.empty()) {
    OpScope op_scope("GEMM dgrad", flops);
    const Tensor dy = operand_buffer({N, O}, kSlotDy);
    const float ady = fp4_operand(dy_NO.ptr, DType::F32, N, O, f, Fp4Role::DgradDy, key, dy.ptr);
    const Fp4Weight w = fp4_weight(w_OD, 1, O, D, f, true, o.wq);
    gemm_operands(false, false, N, D, O, fp4_alpha(f, ady, w.amax[0]), dy, 0, O, w.values, 0, D,
                  o.accumulate ? 1.0f : 0.0f, dx_ND.f32(), D);
  }
  if (dw_OD.empty()) return;
  OpScope op_scope("GEMM wgrad", flops);
  const int64_t K = fp4_wgrad_rows(N);
  const Tensor dy = operand_buffer({K, O}, kSlotDy), x = operand_buffer({K, D}, kSlotX);
  const float ady = fp4_operand(dy_NO.ptr, DType::F32, N, O, f, Fp4Role::WgradDy, key, dy.ptr);
  const float ax = fp4_operand(x_ND.ptr, DType::F32, N, D, f, Fp4Role::WgradX, key, x.ptr);
  gemm_operands(true, false, O, D, K, fp4_alpha(f, ady, ax), dy, 0, O, x, 0, D, 1.0f, dw_OD.f32(),
                D);
}

}  // namespace

// x may have any leading dimensions: rows = numel / D.
void linear_forward(const Tensor& x_ND, const Tensor& w_OD, Tensor& y_NO, const LinearOptions& o) {
  MOET_CHECK(w_OD.ndim == 2, "linear weight must be 2-D, got ", w_OD.shape_str());
  const int64_t O = w_OD.size(0), D = w_OD.size(1), N = rows_of(x_ND);
  MOET_CHECK(x_ND.size(-1) == D && y_NO.size(-1) == O && rows_of(y_NO) == N, "linear: x ",
             x_ND.shape_str(), " w ", w_OD.shape_str(), " y ", y_NO.shape_str());
  check_dtype(y_NO.dtype, {&x_ND, &w_OD});
  OpScope op_scope("GEMM fprop", 2.0 * double(N) * double(O) * double(D));
  const LinearPrecision& p = o.precision;
  const bool accumulate = o.accumulate;
  if (is_fp4(p.fprop)) return fp4_linear_forward(x_ND, w_OD, y_NO, o);
  if (p.fprop != Format::F32) {
    MOET_CHECK(y_NO.dtype == DType::F32, "low-precision linear needs F32 tensors");
    Tensor x = made_operand(o.xq, o.xq ? o.xq->rows : Tensor{}, p.fprop, N * D);
    if (x.empty()) {
      MOET_ASSERT(!x_ND.empty());  // an x without memory comes with its operands
      x = operand_buffer({N, D}, kSlotX);
      quantize(x_ND, p.fprop, BlockAxis::Rows, x);
    }
    const Tensor w = weight_operand(w_OD, p.fprop, false, o.wq);
    return gemm_operands(false, true, N, O, D, 1.0f, x, 0, D, w, 0, D, accumulate ? 1.0f : 0.0f,
                         y_NO.f32(), O);
  }
  dispatch_float(y_NO.dtype, [&](auto t0) {
    using T = decltype(t0);
    blas_gemm(false, true, N, O, D, T(1), x_ND.data<T>(), D, w_OD.data<T>(), D,
              T(accumulate ? 1 : 0), y_NO.data<T>(), O);
  });
}

void linear_backward(const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND,
                     Tensor& dw_OD, const LinearOptions& o) {
  MOET_CHECK(w_OD.ndim == 2, "linear weight must be 2-D, got ", w_OD.shape_str());
  const int64_t O = w_OD.size(0), D = w_OD.size(1), N = rows_of(x_ND);
  MOET_CHECK(x_ND.size(-1) == D && dy_NO.size(-1) == O && rows_of(dy_NO) == N, "linear bwd: x ",
             x_ND.shape_str(), " w ", w_OD.shape_str(), " dy ", dy_NO.shape_str());
  MOET_CHECK(dx_ND.empty() || dx_ND.numel() == N * D, "linear bwd dx ", dx_ND.shape_str());
  MOET_CHECK(dw_OD.empty() || dw_OD.numel() == O * D, "linear bwd dw ", dw_OD.shape_str());
  check_dtype(dy_NO.dtype, {&x_ND, &w_OD, &dx_ND, &dw_OD});
  const LinearPrecision& p = o.precision;
  if (is_fp4(p.dgrad) || is_fp4(p.wgrad))
    return fp4_linear_backward(dy_NO, x_ND, w_OD, dx_ND, dw_OD, o);
  const Operand *dyq_made = o.dyq, *xq_made = o.xq;
  const float beta_dx = o.accumulate ? 1.0f : 0.0f;
  // element-wise formats quantize dy the same way for both GEMMs: one copy serves both
  const bool share_dy = p.dgrad == p.wgrad && !is_fp8(p.dgrad) && !dx_ND.empty();
  Tensor dyq;
  const double flops = 2.0 * double(N) * double(O) * double(D);
  if (!dx_ND.empty()) {
    OpScope op_scope("GEMM dgrad", flops);
    if (p.dgrad == Format::F32) {
      dispatch_float(dy_NO.dtype, [&](auto t0) {
        using T = decltype(t0);
        blas_gemm(false, false, N, D, O, T(1), dy_NO.data<T>(), O, w_OD.data<T>(), D, T(beta_dx),
                  dx_ND.data<T>(), D);
      });
    } else {
      dyq = made_operand(dyq_made, dyq_made ? dyq_made->rows : Tensor{}, p.dgrad, N * O);
      if (dyq.empty()) {
        dyq = operand_buffer({N, O}, kSlotDy);
        quantize(dy_NO, p.dgrad, BlockAxis::Rows, dyq);
      }
      const Tensor w = weight_operand(w_OD, p.dgrad, true, o.wq);
      gemm_operands(false, false, N, D, O, 1.0f, dyq, 0, O, w, 0, D, beta_dx, dx_ND.f32(), D);
    }
  }
  if (dw_OD.empty()) return;
  OpScope op_scope("GEMM wgrad", flops);
  if (p.wgrad == Format::F32) {
    dispatch_float(dy_NO.dtype, [&](auto t0) {
      using T = decltype(t0);
      blas_gemm(true, false, O, D, N, T(1), dy_NO.data<T>(), O, x_ND.data<T>(), D, T(1),
                dw_OD.data<T>(), D);
    });
    return;
  }
  if (!share_dy) {
    dyq = made_operand(dyq_made, dyq_made ? dyq_made->wgrad() : Tensor{}, p.wgrad, N * O);
    if (dyq.empty()) {
      dyq = operand_buffer({N, O}, kSlotDy);
      quantize(dy_NO, p.wgrad, BlockAxis::Cols, dyq);
    }
  }
  Tensor xq = made_operand(xq_made, xq_made ? xq_made->wgrad() : Tensor{}, p.wgrad, N * D);
  if (xq.empty()) {
    MOET_ASSERT(!x_ND.empty());
    xq = operand_buffer({N, D}, kSlotX);
    quantize(x_ND, p.wgrad, BlockAxis::Cols, xq);
  }
  gemm_operands(true, false, O, D, N, 1.0f, dyq, 0, O, xq, 0, D, 1.0f, dw_OD.f32(), D);
}

}  // namespace moet::ops
