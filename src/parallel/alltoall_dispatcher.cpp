#include "parallel/alltoall_dispatcher.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/ops.h"

namespace moet {

AllToAllDispatcher::AllToAllDispatcher(Communicator& ep_group, int64_t n_experts)
    : comm_(ep_group), E_(n_experts), P_(ep_group.size()) {
  MOET_CHECK(E_ % P_ == 0, "n_routed_experts (", E_,
             ") must be divisible by the expert-parallel size (", P_, ")");
  local_ = E_ / P_;
  first_ = int64_t(comm_.rank()) * local_;
  ranks_per_node_ = P_;
  send_counts_.assign(P_ * local_, 0);
  recv_counts_.assign(P_ * local_, 0);
  send_bytes_.assign(P_, 0);
  send_off_.assign(P_, 0);
  recv_bytes_.assign(P_, 0);
  recv_off_.assign(P_, 0);
  cursor_.assign(E_ + 1, 0);
}

void AllToAllDispatcher::plan(Workspace& ws, int64_t D, int64_t K) {
  D_ = D;
  A_ = ws.N() * K;
  // At most every assignment of every rank of the group lands here.
  const int64_t max_rows = A_ * P_;
  Arena& a = ws.act;
  slot_NK_ = a.alloc_i32({ws.N(), K});
  send_token_A_ = a.alloc_i32({A_});
  xp_from_recv_M_ = a.alloc_i32({max_rows});
  recv_from_xp_M_ = a.alloc_i32({max_rows});
  offsets_G1_ = a.alloc_i32({local_ * P_ + 1});
  xp_MD_ = a.alloc_f32({max_rows, D});
  returned_AD_ = a.alloc_f32({A_, D});
  send_AD_ = ws.scratch.alloc_f32({A_, D});
  recv_MD_ = ws.scratch.alloc_f32({max_rows, D});
}

void AllToAllDispatcher::dispatch(const Tensor& x_ND, const Tensor& idx_NK) {
  dispatch_start(x_ND, idx_NK);
  dispatch_finish();
}

void AllToAllDispatcher::dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) {
  const int64_t K = idx_NK.size(1);
  const int32_t* idx = idx_NK.i32();
  // Send order: by destination rank, then local expert, then assignment (token order).
  std::fill(send_counts_.begin(), send_counts_.end(), 0);
  for (int64_t a = 0; a < A_; ++a) {
    MOET_ASSERT(idx[a] >= 0 && idx[a] < E_);
    ++send_counts_[idx[a]];  // key = dest * local + local expert = the global expert id
  }
  std::vector<int64_t>& cursor = cursor_;
  cursor[0] = 0;
  for (int64_t e = 0; e < E_; ++e) cursor[e + 1] = cursor[e] + send_counts_[e];
  // nodes reached per token (for node-limited routing)
  max_nodes_per_token_ = 0;
  const int64_t experts_per_node = local_ * ranks_per_node_;
  for (int64_t n = 0; n < A_ / K; ++n) {
    int64_t nodes = 0;
    for (int64_t k = 0; k < K; ++k) {
      bool seen = false;
      for (int64_t j = 0; j < k; ++j)
        seen |= idx[n * K + j] / experts_per_node == idx[n * K + k] / experts_per_node;
      nodes += !seen;
    }
    max_nodes_per_token_ = std::max(max_nodes_per_token_, nodes);
  }
  int32_t* slot = slot_NK_.i32();
  int32_t* token = send_token_A_.i32();
  for (int64_t a = 0; a < A_; ++a) {
    int64_t pos = cursor[idx[a]]++;
    slot[a] = int32_t(pos);
    token[pos] = int32_t(a / K);
  }
  ops::gather_rows(x_ND, send_token_A_, send_AD_);
  // Counts: each peer learns how many rows of each of its local experts come from here (small;
  // through the stream when there is one, so collectives keep one order).
  auto counts = [this] {
    comm_.alltoall(send_counts_.data(), local_ * int64_t(sizeof(int64_t)), recv_counts_.data());
  };
  xch_.run_now(counts, "expert token counts");
  const int64_t row_bytes = D_ * int64_t(sizeof(float));
  int64_t so = 0, ro = 0;
  for (int64_t p = 0; p < P_; ++p) {
    int64_t s = 0, r = 0;
    for (int64_t l = 0; l < local_; ++l) {
      s += send_counts_[p * local_ + l];
      r += recv_counts_[p * local_ + l];
    }
    send_bytes_[p] = s * row_bytes;
    recv_bytes_[p] = r * row_bytes;
    send_off_[p] = so;
    recv_off_[p] = ro;
    so += send_bytes_[p];
    ro += recv_bytes_[p];
  }
  M_ = ro / row_bytes;
  MOET_ASSERT(M_ <= xp_MD_.size(0));
  issue(send_AD_, recv_MD_.rows(0, M_), true);
}

void AllToAllDispatcher::dispatch_finish() {
  xch_.complete();
  Tensor recv = recv_MD_.rows(0, M_);
  // Expert order: segment g = local expert * P + source rank.
  int32_t* off = offsets_G1_.i32();
  off[0] = 0;
  for (int64_t l = 0; l < local_; ++l)
    for (int64_t p = 0; p < P_; ++p)
      off[l * P_ + p + 1] = off[l * P_ + p] + int32_t(recv_counts_[p * local_ + l]);
  int32_t* to_xp = xp_from_recv_M_.i32();
  int32_t* to_recv = recv_from_xp_M_.i32();
  int64_t r = 0;
  for (int64_t p = 0; p < P_; ++p)
    for (int64_t l = 0; l < local_; ++l)
      for (int64_t i = 0; i < recv_counts_[p * local_ + l]; ++i, ++r) {
        int32_t m = off[l * P_ + p] + int32_t(i);
        to_xp[r] = m;
        to_recv[m] = int32_t(r);
      }
  Tensor xp = xp_MD_.rows(0, M_);
  ops::gather_rows(recv, recv_from_xp_M_.rows(0, M_), xp);
}

void AllToAllDispatcher::exchange(const Tensor& rows_in, Tensor& rows_out, bool forward) {
  const std::vector<int64_t>& sb = forward ? send_bytes_ : recv_bytes_;
  const std::vector<int64_t>& so = forward ? send_off_ : recv_off_;
  const std::vector<int64_t>& rb = forward ? recv_bytes_ : send_bytes_;
  const std::vector<int64_t>& ro = forward ? recv_off_ : send_off_;
  comm_.alltoallv(rows_in.ptr, sb.data(), so.data(), rows_out.ptr, rb.data(), ro.data());
  const int64_t me = comm_.rank();
  for (int64_t p = 0; p < P_; ++p) {
    if (p == me) continue;
    bytes_sent_ += sb[p];
    if (p / ranks_per_node_ != me / ranks_per_node_) bytes_sent_other_nodes_ += sb[p];
  }
}

void AllToAllDispatcher::set_ranks_per_node(int64_t r) {
  MOET_CHECK(r >= 1 && P_ % r == 0, "--ep-ranks-per-node ", r,
             " must divide the expert-parallel size ", P_);
  ranks_per_node_ = r;
}

void AllToAllDispatcher::issue(const Tensor& rows_in, Tensor rows_out, bool forward) {
  xch_.issue([this, rows_in, rows_out, forward]() mutable { exchange(rows_in, rows_out, forward); },
             "expert all-to-all");
}

void AllToAllDispatcher::combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND,
                                 bool accumulate) {
  combine_start(yp_MD);
  combine_finish(gates_NK, y_ND, accumulate);
}

void AllToAllDispatcher::combine_start(const Tensor& yp_MD) {
  Tensor back = recv_MD_.rows(0, M_);
  ops::gather_rows(yp_MD, xp_from_recv_M_.rows(0, M_), back);  // expert order → receive order
  issue(back, returned_AD_, false);
}

void AllToAllDispatcher::combine_finish(const Tensor& gates_NK, Tensor& y_ND, bool accumulate) {
  xch_.complete();
  ops::unpermute_forward(returned_AD_, slot_NK_, gates_NK, y_ND, accumulate);
}

void AllToAllDispatcher::combine_backward(const Tensor& dy_ND, const Tensor& yp_MD,
                                          const Tensor& gates_NK, Tensor& dyp_MD,
                                          Tensor& dgates_NK) {
  combine_backward_start(dy_ND, yp_MD, gates_NK, dgates_NK);
  combine_backward_finish(dyp_MD);
}

void AllToAllDispatcher::combine_backward_start(const Tensor& dy_ND, const Tensor&,
                                                const Tensor& gates_NK, Tensor& dgates_NK) {
  ops::unpermute_backward(dy_ND, returned_AD_, slot_NK_, gates_NK, send_AD_, dgates_NK);
  issue(send_AD_, recv_MD_.rows(0, M_), true);
}

void AllToAllDispatcher::combine_backward_finish(Tensor& dyp_MD) {
  xch_.complete();
  ops::gather_rows(recv_MD_.rows(0, M_), recv_from_xp_M_.rows(0, M_), dyp_MD);
}

void AllToAllDispatcher::dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) {
  dispatch_backward_start(dxp_MD);
  dispatch_backward_finish(dx_ND);
}

void AllToAllDispatcher::dispatch_backward_start(const Tensor& dxp_MD) {
  Tensor back = recv_MD_.rows(0, M_);
  ops::gather_rows(dxp_MD, xp_from_recv_M_.rows(0, M_), back);
  issue(back, send_AD_, false);
}

void AllToAllDispatcher::dispatch_backward_finish(Tensor& dx_ND) {
  xch_.complete();
  ops::gather_rows_backward(send_AD_, slot_NK_, dx_ND);
}

}  // namespace moet
