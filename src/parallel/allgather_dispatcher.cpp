#include "parallel/allgather_dispatcher.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/trace.h"
#include "kernels/ops.h"

namespace moet {

AllGatherDispatcher::AllGatherDispatcher(Communicator& ep_group, int64_t n_experts)
    : ExpertExchangeDispatcher(ep_group, n_experts) {
  seg_counts_.assign(local_ * P_, 0);
  seg_cursor_.assign(local_ * P_, 0);
  recv_cursor_.assign(P_ * local_, 0);
}

void AllGatherDispatcher::plan(Workspace& ws, int64_t D, int64_t K) {
  plan_common(ws, D, K);
  Arena& s = ws.scratch;
  x_all_PND_ = s.alloc_f32({P_ * N_, D});
  idx_all_PNK_ = s.alloc_i32({P_ * A_});
  row_M_ = s.alloc_i32({A_ * P_});
}

void AllGatherDispatcher::dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) {
  MOET_ASSERT(x_ND.size(0) == N_ && x_ND.size(1) == D_);
  MOET_ASSERT(idx_NK.size(0) == N_ && idx_NK.size(1) == K_);
  // Gather: the group's routing and tokens (packed in the dispatch format), in rank order. Under
  // an FP4 dispatch a token is quantized under a different segment's amax for each expert it
  // reaches: it travels once in bf16, and the segments are quantized on arrival.
  const ops::Format f = ops::is_fp4(dispatch_format_) ? ops::Format::BF16 : dispatch_format_;
  if (f != ops::Format::F32) ops::encode_rows(x_ND, f, wire_send_.ptr);
  xch_.issue(
      [this, x_ND, idx_NK, f] {
        const int64_t x_bytes = N_ * row_bytes(f);
        const int64_t idx_bytes = A_ * int64_t(sizeof(int32_t));
        comm_.allgather(idx_NK.ptr, idx_bytes, idx_all_PNK_.ptr);
        if (f == ops::Format::F32)
          comm_.allgather(x_ND.ptr, x_bytes, x_all_PND_.ptr);
        else
          comm_.allgather(wire_send_.ptr, x_bytes, wire_recv_.ptr);
        bytes_sent_ += (x_bytes + idx_bytes) * (P_ - 1);
        routing_bytes_sent_ += idx_bytes * (P_ - 1);
      },
      "expert all-gather", trace::kDispatch,
      (N_ * row_bytes(f) + A_ * int64_t(sizeof(int32_t))) * (P_ - 1));
  // Source side (this rank's own tokens), while the gather runs: where the outputs come back.
  sort_sources(idx_NK, nullptr);
}

void AllGatherDispatcher::dispatch_finish() {
  xch_.complete();
  const bool fp4 = ops::is_fp4(dispatch_format_);
  if (dispatch_format_ != ops::Format::F32)
    ops::decode_rows(wire_recv_.ptr, fp4 ? ops::Format::BF16 : dispatch_format_, x_all_PND_);
  // Expert side: the rows of the group routed to this rank's experts, per (expert, source).
  const int32_t* idx_all = idx_all_PNK_.i32();
  std::fill(seg_counts_.begin(), seg_counts_.end(), 0);
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t a = 0; a < A_; ++a) {
      const int64_t l = idx_all[p * A_ + a] - first_;
      if (l >= 0 && l < local_) ++seg_counts_[l * P_ + p];
    }
  // Expert order: segment g = local expert * P + source rank.
  int32_t* off = offsets_G1_.i32();
  off[0] = 0;
  for (int64_t g = 0; g < local_ * P_; ++g) {
    off[g + 1] = off[g] + int32_t(seg_counts_[g]);
    seg_cursor_[g] = off[g];
  }
  M_ = off[local_ * P_];
  MOET_ASSERT(M_ <= xp_MD_.size(0));
  // Receive order: by source rank, then local expert, then assignment (what each source expects
  // from this rank, in its source order).
  int64_t r = 0;
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t l = 0; l < local_; ++l) {
      recv_cursor_[p * local_ + l] = r;
      r += seg_counts_[l * P_ + p];
    }
  int32_t* row = row_M_.i32();
  int32_t* xp_of_back = xp_from_recv_M_.i32();
  int32_t* back_of_xp = recv_from_xp_M_.i32();
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t a = 0; a < A_; ++a) {
      const int64_t l = idx_all[p * A_ + a] - first_;
      if (l < 0 || l >= local_) continue;
      const int64_t m = seg_cursor_[l * P_ + p]++, b = recv_cursor_[p * local_ + l]++;
      row[m] = int32_t(p * N_ + a / K_);
      xp_of_back[b] = int32_t(m);
      back_of_xp[m] = int32_t(b);
    }
  Tensor xp = xp_MD_.rows(0, M_);
  ops::gather_rows(x_all_PND_, row_M_.rows(0, M_), xp);
  if (fp4) ops::quantize_fp4_segments(xp, off, local_ * P_, dispatch_format_, amax_G_.f32());

  // The alltoallv layout between sources and experts, for the return path.
  layout_exchange([this](int64_t p, int64_t l) { return seg_counts_[l * P_ + p]; });
}

}  // namespace moet
