#include "parallel/alltoall_dispatcher.h"

#include "core/trace.h"
#include "kernels/ops.h"

namespace moet {

AllToAllDispatcher::AllToAllDispatcher(Communicator& ep_group, int64_t n_experts)
    : ExpertExchangeDispatcher(ep_group, n_experts) {
  recv_counts_.assign(P_ * local_, 0);
  send_amax_.assign(E_, 0.0f);
  recv_amax_.assign(P_ * local_, 0.0f);
}

void AllToAllDispatcher::plan(Workspace& ws, int64_t D, int64_t K) {
  plan_common(ws, D, K);
  send_token_A_ = ws.act.alloc_i32({A_});
}

void AllToAllDispatcher::dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) {
  sort_sources(idx_NK, send_token_A_.i32());
  ops::gather_rows(x_ND, send_token_A_, send_AD_);
  const ops::Format f = dispatch_format_;
  const bool fp4 = ops::is_fp4(f);
  if (fp4) {
    // each segment (the rows to one expert) quantized under its own amax
    const int64_t rb = row_bytes(f);
    for (int64_t e = 0, r0 = 0; e < E_; r0 += send_counts_[size_t(e)], ++e) {
      const Tensor rows = send_AD_.rows(r0, r0 + send_counts_[size_t(e)]);
      send_amax_[size_t(e)] = f == ops::Format::NVFP4 && rows.numel() > 0
                                  ? ops::fp4_amax(rows, ops::BlockAxis::Rows)
                                  : 0.0f;
      ops::encode_fp4_rows(rows, f, send_amax_[size_t(e)],
                           static_cast<unsigned char*>(wire_send_.ptr) + r0 * rb);
    }
  } else if (f != ops::Format::F32) {
    ops::encode_rows(send_AD_, f, wire_send_.ptr);
  }
  // Counts: each peer learns how many rows of each of its local experts come from here (small;
  // through the stream when there is one, so collectives keep one order).
  xch_.run_now(
      [this] {
        comm_.alltoall(send_counts_.data(), local_ * int64_t(sizeof(int64_t)), recv_counts_.data());
      },
      "expert token counts", trace::kDispatch, (P_ - 1) * local_ * int64_t(sizeof(int64_t)));
  if (fp4)
    xch_.run_now(
        [this] {
          comm_.alltoall(send_amax_.data(), local_ * int64_t(sizeof(float)), recv_amax_.data());
        },
        "expert segment amaxes", trace::kDispatch, (P_ - 1) * local_ * int64_t(sizeof(float)));
  layout_exchange([this](int64_t p, int64_t l) { return recv_counts_[p * local_ + l]; });
  xch_.issue(
      [this, f] {
        if (f == ops::Format::F32)
          exchange(send_AD_.ptr, recv_MD_.ptr, true, row_bytes(f));
        else
          exchange(wire_send_.ptr, wire_recv_.ptr, true, row_bytes(f));
      },
      "expert all-to-all", trace::kDispatch, exchange_bytes(true, row_bytes(f)));
}

void AllToAllDispatcher::dispatch_finish() {
  xch_.complete();
  if (dispatch_format_ != ops::Format::F32) {
    Tensor recv = recv_MD_.rows(0, M_);
    ops::decode_rows(wire_recv_.ptr, dispatch_format_, recv);
  }
  // Expert order: segment g = local expert * P + source rank.
  int32_t* off = offsets_G1_.i32();
  off[0] = 0;
  for (int64_t l = 0; l < local_; ++l)
    for (int64_t p = 0; p < P_; ++p) {
      off[l * P_ + p + 1] = off[l * P_ + p] + int32_t(recv_counts_[p * local_ + l]);
      if (!amax_G_.empty()) amax_G_.f32()[l * P_ + p] = recv_amax_[size_t(p * local_ + l)];
    }
  int32_t* to_xp = xp_from_recv_M_.i32();
  int32_t* to_recv = recv_from_xp_M_.i32();
  int64_t r = 0;
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t l = 0; l < local_; ++l)
      for (int64_t i = 0; i < recv_counts_[p * local_ + l]; ++i, ++r) {
        const int32_t m = off[l * P_ + p] + int32_t(i);
        to_xp[r] = m;
        to_recv[m] = int32_t(r);
      }
  Tensor xp = xp_MD_.rows(0, M_);
  ops::gather_rows(recv_MD_.rows(0, M_), recv_from_xp_M_.rows(0, M_), xp);
}

}  // namespace moet
