// layout.cpp — column concatenation / split and MLA's per-head key/value assembly.
#include <algorithm>

#include "kernels/cpu/common.h"
#include "kernels/cpu/emit.h"
#include "kernels/ops.h"
#include "kernels/profile.h"

namespace moet::ops {
using namespace cpu;

void concat_cols(const Tensor& a_NA, const Tensor& b_NB, Tensor& out_NC, const Operand& q) {
  OpScope op_scope("copy/add", 0,
                   double(a_NA.bytes() + b_NB.bytes() + (out_NC.empty() ? 0 : out_NC.bytes())) +
                       operand_bytes(q, out_NC.ptr));
  const int64_t A = a_NA.size(-1), B = b_NB.size(-1), N = rows_of(out_NC);
  MOET_CHECK(out_NC.size(-1) == A + B && rows_of(a_NA) == N && rows_of(b_NB) == N,
             "concat_cols: a ", a_NA.shape_str(), " b ", b_NB.shape_str(), " out ",
             out_NC.shape_str());
  check_dtype(out_NC.dtype, {&a_NA, &b_NB});
  MOET_CHECK(q.empty() || out_NC.dtype == DType::F32, "concat_cols: operands need F32");
  dispatch_float(out_NC.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* a = a_NA.data<T>();
    const T* b = b_NB.data<T>();
    produce_rows(N, A + B, out_NC.data<T>(), q, [&](int64_t r0, int64_t r1, T* o) {
      for (int64_t n = r0; n < r1; ++n) {
        std::copy_n(a + n * A, A, o + (n - r0) * (A + B));
        std::copy_n(b + n * B, B, o + (n - r0) * (A + B) + A);
      }
    });
  });
}

void split_cols(const Tensor& d_NC, Tensor& da_NA, Tensor& db_NB) {
  OpScope op_scope("copy/add", 0, 2.0 * double(d_NC.bytes()));
  const int64_t A = da_NA.size(-1), B = db_NB.size(-1), N = rows_of(d_NC);
  MOET_CHECK(d_NC.size(-1) == A + B && rows_of(da_NA) == N && rows_of(db_NB) == N, "split_cols: d ",
             d_NC.shape_str(), " da ", da_NA.shape_str(), " db ", db_NB.shape_str());
  check_dtype(d_NC.dtype, {&da_NA, &db_NB});
  dispatch_float(d_NC.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* d = d_NC.data<T>();
    T* da = da_NA.data<T>();
    T* db = db_NB.data<T>();
#pragma omp parallel for schedule(static) if (N * (A + B) > kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      std::copy_n(d + n * (A + B), A, da + n * A);
      std::copy_n(d + n * (A + B) + A, B, db + n * B);
    }
  });
}

namespace {
struct MlaDims {
  int64_t N, H, P, R, U;
};
// kv [N, H, P+U], kr [N, R], k [N, H, P+R], v [N, H, U] (leading dims may be split, e.g. B, T).
MlaDims mla_dims(const Tensor& kv, const Tensor& kr, const Tensor& k, const Tensor& v) {
  MOET_CHECK(kv.ndim >= 3 && k.ndim >= 3 && v.ndim >= 3, "mla_split_kv: kv ", kv.shape_str(), " k ",
             k.shape_str(), " v ", v.shape_str(), " need [N, H, W]");
  MlaDims d{};
  d.H = kv.size(-2);
  d.R = kr.size(-1);
  d.U = v.size(-1);
  d.P = kv.size(-1) - d.U;
  d.N = rows_of(kr);
  MOET_CHECK(d.P >= 0 && k.size(-1) == d.P + d.R && k.size(-2) == d.H && v.size(-2) == d.H &&
                 kv.numel() == d.N * d.H * (d.P + d.U) && k.numel() == d.N * d.H * (d.P + d.R) &&
                 v.numel() == d.N * d.H * d.U,
             "mla_split_kv: kv ", kv.shape_str(), " kr ", kr.shape_str(), " k ", k.shape_str(),
             " v ", v.shape_str());
  check_dtype(kv.dtype, {&kr, &k, &v});
  return d;
}
}  // namespace

void mla_split_kv(const Tensor& kv_NHW, const Tensor& kr_NR, Tensor& k_NHK, Tensor& v_NHU) {
  OpScope op_scope("copy/add", 0, 2.0 * double(k_NHK.bytes() + v_NHU.bytes()));
  const MlaDims d = mla_dims(kv_NHW, kr_NR, k_NHK, v_NHU);
  dispatch_float(kv_NHW.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* kv = kv_NHW.data<T>();
    const T* kr = kr_NR.data<T>();
    T* k = k_NHK.data<T>();
    T* v = v_NHU.data<T>();
    const int64_t W = d.P + d.U, Kd = d.P + d.R;
#pragma omp parallel for schedule(static) if (d.N * d.H * (W + Kd) > kParallelMin)
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t h = 0; h < d.H; ++h) {
        const T* src = kv + (n * d.H + h) * W;
        T* kd = k + (n * d.H + h) * Kd;
        std::copy_n(src, d.P, kd);
        std::copy_n(kr + n * d.R, d.R, kd + d.P);
        std::copy_n(src + d.P, d.U, v + (n * d.H + h) * d.U);
      }
  });
}

void mla_split_kv_backward(const Tensor& dk_NHK, const Tensor& dv_NHU, Tensor& dkv_NHW,
                           Tensor& dkr_NR, const Operand& dkvq) {
  OpScope op_scope("copy/add", 0,
                   double(dk_NHK.bytes() + dv_NHU.bytes() + dkr_NR.bytes() +
                          (dkv_NHW.empty() ? 0 : dkv_NHW.bytes())) +
                       operand_bytes(dkvq, dkv_NHW.ptr));
  const MlaDims d = mla_dims(dkv_NHW, dkr_NR, dk_NHK, dv_NHU);
  MOET_CHECK(dkvq.empty() || dkv_NHW.dtype == DType::F32, "mla_split_kv bwd: operands need F32");
  dispatch_float(dk_NHK.dtype, [&](auto t0) {
    using T = decltype(t0);
    const T* dk = dk_NHK.data<T>();
    const T* dv = dv_NHU.data<T>();
    T* dkr = dkr_NR.data<T>();
    const int64_t W = d.P + d.U, Kd = d.P + d.R;
    produce_rows(d.N, d.H * W, dkv_NHW.data<T>(), dkvq, [&](int64_t r0, int64_t r1, T* out) {
      for (int64_t n = r0; n < r1; ++n) {
        T* r = dkr + n * d.R;
        std::fill_n(r, d.R, T(0));
        for (int64_t h = 0; h < d.H; ++h) {
          const T* src = dk + (n * d.H + h) * Kd;
          T* dst = out + ((n - r0) * d.H + h) * W;
          std::copy_n(src, d.P, dst);
          std::copy_n(dv + (n * d.H + h) * d.U, d.U, dst + d.P);
          for (int64_t j = 0; j < d.R; ++j) r[j] += src[d.P + j];
        }
      }
    });
  });
}

}  // namespace moet::ops
