// operands.h — private helpers of the GEMM ops: low-precision operand temporaries (thread-local,
// grow-only, in gemm_operand_dtype()) and a GEMM over F32 or BF16 operand tensors.
#pragma once
#include <initializer_list>
#include <type_traits>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/common.h"
#include "kernels/ops.h"

namespace moet::ops::cpu {

// Scratch slots of the operand temporaries (common.h's scratch<T>; other kernels use 0..3).
enum OperandSlot { kSlotX = 4, kSlotW = 5, kSlotDy = 6, kSlotX2 = 7 };

inline Tensor operand_buffer(std::initializer_list<int64_t> dims, int slot) {
  const DType dt = gemm_operand_dtype();
  size_t n = 1;
  for (int64_t d : dims) n *= size_t(d);
  void* p = dt == DType::BF16 ? static_cast<void*>(scratch<uint16_t>(n, slot))
                              : static_cast<void*>(scratch<float>(n, slot));
  return Tensor(p, dt, dims);
}

// C (F32) = alpha · op(A) · op(B) + beta · C, where A and B are F32 or BF16 (the same), given
// as element offsets into their tensors.
inline void gemm_operands(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const Tensor& A, int64_t a_off, int64_t lda, const Tensor& B,
                          int64_t b_off, int64_t ldb, float beta, float* C, int64_t ldc) {
  MOET_ASSERT(A.dtype == B.dtype);
  if (A.dtype == DType::BF16)
    blas_gemm(ta, tb, M, N, K, alpha, A.bf16() + a_off, lda, B.bf16() + b_off, ldb, beta, C, ldc);
  else
    blas_gemm(ta, tb, M, N, K, alpha, A.f32() + a_off, lda, B.f32() + b_off, ldb, beta, C, ldc);
}

// The axis of a weight's blocks in a GEMM of the given role: fprop reduces over the input dim
// (rows of [O, D] hold it), dgrad over the output dim; FP8Block weights use 128×128 squares.
inline BlockAxis weight_axis(Format f, bool dgrad) {
  if (f == Format::FP8Block) return BlockAxis::Square;
  return dgrad ? BlockAxis::Cols : BlockAxis::Rows;
}

}  // namespace moet::ops::cpu
