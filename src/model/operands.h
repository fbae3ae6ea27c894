// Memory for the GEMM operands a layer's producers write (ops::Operand, docs/kernels.md
// "Operands"): planned with the layer's arenas, in the formats of its precision. A layer plans
// the operands of each activation its GEMMs read — x for fprop and wgrad, dy for dgrad and wgrad
// — and hands them to the op that produces the activation and to the GEMMs that read it.
#pragma once
#include "core/arena.h"
#include "kernels/ops.h"

namespace moet {

// The operands of an [R, C] activation read by a GEMM that reduces over C in `rows_fmt` (rows
// copy; F32: none) and by a wgrad in `cols_fmt` (a cols copy in FP8 formats; an element-wise
// format reads the rows copy, which must then be in the same format). Empty when no copy is
// needed, when the two formats differ, or in an FP4 format (the GEMMs then quantize themselves).
ops::Operand plan_operand(Arena& a, int64_t R, int64_t C, ops::Format rows_fmt,
                          ops::Format cols_fmt);
// x of linear layers in precision p (fprop and wgrad), and dy (dgrad and wgrad).
inline ops::Operand plan_input_operand(Arena& a, int64_t R, int64_t C,
                                       const ops::LinearPrecision& p) {
  return plan_operand(a, R, C, p.fprop, p.wgrad);
}
inline ops::Operand plan_grad_operand(Arena& a, int64_t R, int64_t C,
                                      const ops::LinearPrecision& p) {
  return plan_operand(a, R, C, p.dgrad, p.wgrad);
}
// An activation whose only readers after its producer are GEMMs in precision p (as x when `grad`
// is false, as dy when it is): its fp32 values and its operands. In fp32 the values alone. In low
// precision with fp32 operands, the rows copy is the activation's own memory (its producer rounds
// it in place); with bf16 operands the values have no memory (a shape: the producer computes them
// in a tile) unless `written_before` — the values are written by another op before the producer
// turns them into operands in place (rope's backward on attention's dq).
struct GemmInput {
  Tensor values;
  ops::Operand q;
};
GemmInput plan_gemm_input(Arena& a, int64_t R, int64_t C, const ops::LinearPrecision& p,
                          bool grad = false, bool written_before = false);

// The first R rows of q's copies (a grouped layer's rows this call: blocks restart at segments).
ops::Operand operand_rows(const ops::Operand& q, int64_t R);

}  // namespace moet
