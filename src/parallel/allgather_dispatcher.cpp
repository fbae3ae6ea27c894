#include "parallel/allgather_dispatcher.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/ops.h"

namespace moet {

AllGatherDispatcher::AllGatherDispatcher(Communicator& ep_group, int64_t n_experts)
    : comm_(ep_group), E_(n_experts), P_(ep_group.size()) {
  MOET_CHECK(E_ % P_ == 0, "n_routed_experts (", E_,
             ") must be divisible by the expert-parallel size (", P_, ")");
  local_ = E_ / P_;
  first_ = int64_t(comm_.rank()) * local_;
  src_counts_.assign(E_, 0);
  seg_counts_.assign(local_ * P_, 0);
  send_bytes_.assign(P_, 0);
  send_off_.assign(P_, 0);
  recv_bytes_.assign(P_, 0);
  recv_off_.assign(P_, 0);
  cursor_.assign(E_ + 1, 0);
  seg_cursor_.assign(local_ * P_, 0);
  back_cursor_.assign(P_ * local_, 0);
}

void AllGatherDispatcher::plan(Workspace& ws, int64_t D, int64_t K) {
  N_ = ws.N();
  D_ = D;
  K_ = K;
  A_ = N_ * K;
  // At most every assignment of every rank of the group lands here.
  const int64_t max_rows = A_ * P_;
  Arena& a = ws.act;
  slot_NK_ = a.alloc_i32({N_, K});
  offsets_G1_ = a.alloc_i32({local_ * P_ + 1});
  xp_of_back_M_ = a.alloc_i32({max_rows});
  back_of_xp_M_ = a.alloc_i32({max_rows});
  xp_MD_ = a.alloc_f32({max_rows, D});
  returned_AD_ = a.alloc_f32({A_, D});
  Arena& s = ws.scratch;
  x_all_PND_ = s.alloc_f32({P_ * N_, D});
  idx_all_PNK_ = s.alloc_i32({P_ * A_});
  row_M_ = s.alloc_i32({max_rows});
  back_MD_ = s.alloc_f32({max_rows, D});
  src_AD_ = s.alloc_f32({A_, D});
}

void AllGatherDispatcher::dispatch(const Tensor& x_ND, const Tensor& idx_NK) {
  dispatch_start(x_ND, idx_NK);
  dispatch_finish();
}

void AllGatherDispatcher::dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) {
  MOET_ASSERT(x_ND.size(0) == N_ && x_ND.size(1) == D_);
  MOET_ASSERT(idx_NK.size(0) == N_ && idx_NK.size(1) == K_);
  // Gather: the group's routing and tokens, in rank order.
  xch_.issue(
      [this, x_ND, idx_NK] {
        const int64_t x_bytes = N_ * D_ * int64_t(sizeof(float));
        const int64_t idx_bytes = A_ * int64_t(sizeof(int32_t));
        comm_.allgather(idx_NK.ptr, idx_bytes, idx_all_PNK_.ptr);
        comm_.allgather(x_ND.ptr, x_bytes, x_all_PND_.ptr);
        bytes_sent_ += x_bytes * (P_ - 1);
        routing_bytes_sent_ += idx_bytes * (P_ - 1);
      },
      "expert all-gather");
  // Source side (this rank's own tokens), while the gather runs: source order = by global
  // expert (so by destination rank, then local expert), then assignment — where the outputs
  // come back in combine.
  const int32_t* idx = idx_NK.i32();
  std::fill(src_counts_.begin(), src_counts_.end(), 0);
  for (int64_t a = 0; a < A_; ++a) {
    MOET_ASSERT(idx[a] >= 0 && idx[a] < E_);
    ++src_counts_[idx[a]];
  }
  cursor_[0] = 0;
  for (int64_t e = 0; e < E_; ++e) cursor_[e + 1] = cursor_[e] + src_counts_[e];
  int32_t* slot = slot_NK_.i32();
  for (int64_t a = 0; a < A_; ++a) slot[a] = int32_t(cursor_[idx[a]]++);
}

void AllGatherDispatcher::dispatch_finish() {
  xch_.complete();
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
  // Back order: by source rank, then local expert, then assignment (what each source expects
  // from this rank, in its source order).
  int64_t r = 0;
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t l = 0; l < local_; ++l) {
      back_cursor_[p * local_ + l] = r;
      r += seg_counts_[l * P_ + p];
    }
  int32_t* row = row_M_.i32();
  int32_t* xp_of_back = xp_of_back_M_.i32();
  int32_t* back_of_xp = back_of_xp_M_.i32();
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t a = 0; a < A_; ++a) {
      const int64_t l = idx_all[p * A_ + a] - first_;
      if (l < 0 || l >= local_) continue;
      const int64_t m = seg_cursor_[l * P_ + p]++, b = back_cursor_[p * local_ + l]++;
      row[m] = int32_t(p * N_ + a / K_);
      xp_of_back[b] = int32_t(m);
      back_of_xp[m] = int32_t(b);
    }
  Tensor xp = xp_MD_.rows(0, M_);
  ops::gather_rows(x_all_PND_, row_M_.rows(0, M_), xp);

  // The alltoallv layout between sources and experts (bytes, offsets), to_experts direction.
  const int64_t row_bytes = D_ * int64_t(sizeof(float));
  int64_t so = 0, ro = 0;
  for (int64_t q = 0; q < P_; ++q) {
    int64_t s = 0, rr = 0;
    for (int64_t l = 0; l < local_; ++l) {
      s += src_counts_[q * local_ + l];
      rr += seg_counts_[l * P_ + q];
    }
    send_bytes_[q] = s * row_bytes;
    recv_bytes_[q] = rr * row_bytes;
    send_off_[q] = so;
    recv_off_[q] = ro;
    so += send_bytes_[q];
    ro += recv_bytes_[q];
  }
}

void AllGatherDispatcher::exchange(const Tensor& rows_in, Tensor& rows_out, bool to_experts) {
  const std::vector<int64_t>& sb = to_experts ? send_bytes_ : recv_bytes_;
  const std::vector<int64_t>& so = to_experts ? send_off_ : recv_off_;
  const std::vector<int64_t>& rb = to_experts ? recv_bytes_ : send_bytes_;
  const std::vector<int64_t>& ro = to_experts ? recv_off_ : send_off_;
  comm_.alltoallv(rows_in.ptr, sb.data(), so.data(), rows_out.ptr, rb.data(), ro.data());
  for (int64_t p = 0; p < P_; ++p)
    if (p != comm_.rank()) bytes_sent_ += sb[p];
}

void AllGatherDispatcher::combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND,
                                  bool accumulate) {
  combine_start(yp_MD);
  combine_finish(gates_NK, y_ND, accumulate);
}

void AllGatherDispatcher::combine_start(const Tensor& yp_MD) {
  Tensor back = back_MD_.rows(0, M_);
  ops::gather_rows(yp_MD, xp_of_back_M_.rows(0, M_), back);  // expert order → back order
  // each output to its source rank only
  xch_.issue([this, back] { exchange(back, returned_AD_, false); }, "expert outputs to sources");
}

void AllGatherDispatcher::combine_finish(const Tensor& gates_NK, Tensor& y_ND, bool accumulate) {
  xch_.complete();
  ops::unpermute_forward(returned_AD_, slot_NK_, gates_NK, y_ND, accumulate);
}

void AllGatherDispatcher::combine_backward(const Tensor& dy_ND, const Tensor& yp_MD,
                                           const Tensor& gates_NK, Tensor& dyp_MD,
                                           Tensor& dgates_NK) {
  combine_backward_start(dy_ND, yp_MD, gates_NK, dgates_NK);
  combine_backward_finish(dyp_MD);
}

void AllGatherDispatcher::combine_backward_start(const Tensor& dy_ND, const Tensor&,
                                                 const Tensor& gates_NK, Tensor& dgates_NK) {
  ops::unpermute_backward(dy_ND, returned_AD_, slot_NK_, gates_NK, src_AD_, dgates_NK);
  xch_.issue(
      [this] {
        Tensor back = back_MD_.rows(0, M_);
        exchange(src_AD_, back, true);
      },
      "output gradients to experts");
}

void AllGatherDispatcher::combine_backward_finish(Tensor& dyp_MD) {
  xch_.complete();
  ops::gather_rows(back_MD_.rows(0, M_), back_of_xp_M_.rows(0, M_), dyp_MD);  // → expert order
}

void AllGatherDispatcher::dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) {
  dispatch_backward_start(dxp_MD);
  dispatch_backward_finish(dx_ND);
}

void AllGatherDispatcher::dispatch_backward_start(const Tensor& dxp_MD) {
  Tensor back = back_MD_.rows(0, M_);
  ops::gather_rows(dxp_MD, xp_of_back_M_.rows(0, M_), back);
  // each row gradient to its source rank (the transpose of gather + select)
  xch_.issue([this, back] { exchange(back, src_AD_, false); }, "input gradients to sources");
}

void AllGatherDispatcher::dispatch_backward_finish(Tensor& dx_ND) {
  xch_.complete();
  ops::gather_rows_backward(src_AD_, slot_NK_, dx_ND);
}

}  // namespace moet
