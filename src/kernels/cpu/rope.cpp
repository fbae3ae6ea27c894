// rope.cpp — rotary position embedding (interleaved pairs), forward and its transpose.
#include "kernels/cpu/common.h"
#include "kernels/cpu/emit.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

namespace {

// x viewed [N, H, W] (2-D input is [N, W] with H = 1); rotates dims [off, off + 2*R2).
template <bool kInverse>
void rope_apply(Tensor& x, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2,
                const Operand& q = {}) {
  MOET_CHECK(x.ndim >= 2 && cos_TR2.ndim == 2 && sin_TR2.ndim == 2 &&
                 cos_TR2.size(0) == sin_TR2.size(0) && cos_TR2.size(1) == sin_TR2.size(1),
             "rope: x ", x.shape_str(), " cos ", cos_TR2.shape_str(), " sin ", sin_TR2.shape_str());
  const int64_t W = x.size(-1), H = x.ndim == 2 ? 1 : x.size(-2), N = x.numel() / (H * W);
  const int64_t T = cos_TR2.size(0), R2 = cos_TR2.size(1);
  MOET_CHECK(off >= 0 && off + 2 * R2 <= W && T > 0 && N % T == 0, "rope: x ", x.shape_str(),
             " off ", off, " R/2 ", R2, " T ", T);
  check_dtype(x.dtype, {&cos_TR2, &sin_TR2});
  MOET_CHECK(q.empty() || x.dtype == DType::F32, "rope: operands need F32");
  dispatch_float(x.dtype, [&](auto t0) {
    using T_ = decltype(t0);
    const T_* cs = cos_TR2.data<T_>();
    const T_* sn = sin_TR2.data<T_>();
    // in place: each chunk of rows [N, H·W] rotated, then its operands written
    produce_rows(N, H * W, x.data<T_>(), q, [&](int64_t r0, int64_t r1, T_* rows) {
      for (int64_t n = r0; n < r1; ++n) {
        const T_* c = cs + (n % T) * R2;
        const T_* s = sn + (n % T) * R2;
        for (int64_t h = 0; h < H; ++h) {
          T_* v = rows + ((n - r0) * H + h) * W + off;
          for (int64_t i = 0; i < R2; ++i) {
            const T_ a = v[2 * i], b = v[2 * i + 1];
            if constexpr (kInverse) {
              v[2 * i] = a * c[i] + b * s[i];
              v[2 * i + 1] = b * c[i] - a * s[i];
            } else {
              v[2 * i] = a * c[i] - b * s[i];
              v[2 * i + 1] = b * c[i] + a * s[i];
            }
          }
        }
      }
    });
  });
}

}  // namespace

void rope_forward(Tensor& x_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2) {
  OpScope op_scope("rope", 0, 2.0 * double(x_NHW.bytes()));
  rope_apply<false>(x_NHW, off, cos_TR2, sin_TR2);
}

void rope_backward(Tensor& dx_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2,
                   const Operand& dxq) {
  OpScope op_scope("rope", 0, 2.0 * double(dx_NHW.bytes()) + operand_bytes(dxq, dx_NHW.ptr));
  rope_apply<true>(dx_NHW, off, cos_TR2, sin_TR2, dxq);
}

}  // namespace moet::ops
