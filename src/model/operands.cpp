#include "model/operands.h"

namespace moet {

ops::Operand plan_operand(Arena& a, int64_t R, int64_t C, ops::Format rows_fmt,
                          ops::Format cols_fmt) {
  ops::Operand q;
  if (rows_fmt == ops::Format::F32 && cols_fmt == ops::Format::F32) return q;
  if (rows_fmt != cols_fmt || ops::is_fp4(rows_fmt)) return q;  // FP4: the GEMMs quantize
  q.fmt = rows_fmt;
  const DType dt = ops::gemm_operand_dtype();
  q.rows = a.alloc(dt, {R, C});
  if (ops::is_fp8(cols_fmt)) q.cols = a.alloc(dt, {R, C});
  return q;
}

GemmInput plan_gemm_input(Arena& a, int64_t R, int64_t C, const ops::LinearPrecision& p, bool grad,
                          bool written_before) {
  const ops::Format rows_fmt = grad ? p.dgrad : p.fprop;
  GemmInput g;
  if (rows_fmt == ops::Format::F32 || rows_fmt != p.wgrad || ops::is_fp4(rows_fmt)) {
    g.values = a.alloc_f32({R, C});
    g.q = plan_operand(a, R, C, rows_fmt, p.wgrad);  // empty
    return g;
  }
  g.q.fmt = rows_fmt;
  if (ops::gemm_operand_dtype() == DType::F32) {
    g.values = a.alloc_f32({R, C});
    g.q.rows = g.values;
  } else {
    g.values = written_before ? a.alloc_f32({R, C}) : Tensor(nullptr, DType::F32, {R, C});
    g.q.rows = a.alloc(DType::BF16, {R, C});
  }
  if (ops::is_fp8(p.wgrad)) g.q.cols = a.alloc(ops::gemm_operand_dtype(), {R, C});
  return g;
}

ops::Operand operand_rows(const ops::Operand& q, int64_t R) {
  ops::Operand o = q;
  if (!o.rows.empty()) o.rows = o.rows.rows(0, R);
  if (!o.cols.empty()) o.cols = o.cols.rows(0, R);
  return o;
}

}  // namespace moet
