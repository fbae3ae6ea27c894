// AllGatherDispatcher: expert parallelism over a Communicator by all-gather. Every rank of the
// expert-parallel group gathers every rank's tokens (x rows, once per token, not per (token, k))
// and routing (idx), and keeps the rows routed to its own experts; no count exchange is needed,
// since the gathered idx tells every rank the whole layout. Cheaper than the all-to-all when a
// token's K copies outnumber the group (K > P): the gather moves N rows to each peer, the
// all-to-all about N·K·(P-1)/P rows in all.
//
// The return path of combine is an alltoallv that moves each expert output only to its source
// rank (no reduce-scatter: the source sums its K outputs with the gates in k order, like
// ops::unpermute_forward, so the numbers stay bitwise those of the all-to-all and the local
// dispatcher). Backward: the backward of combine sends the row gradients from the sources to the
// experts over the same alltoallv layout, the backward of dispatch (the transpose of gather +
// select) returns the row gradients to their source rank, where they are summed in k order.
//
// Same contract and layout as AllToAllDispatcher: experts in equal contiguous blocks over the
// ranks; expert_rows() grouped by local expert, then source rank, then token (then k) order;
// segments_per_expert() = P.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/dispatcher.h"
#include "parallel/async_exchange.h"
#include "parallel/communicator.h"

namespace moet {

class AllGatherDispatcher final : public TokenDispatcher {
 public:
  AllGatherDispatcher(Communicator& ep_group, int64_t n_experts);
  void plan(Workspace& ws, int64_t D, int64_t K) override;
  int64_t max_expert_rows() const override { return xp_MD_.size(0); }
  int64_t first_local_expert() const override { return first_; }
  int64_t num_local_experts() const override { return local_; }
  int64_t segments_per_expert() const override { return P_; }

  void dispatch(const Tensor& x_ND, const Tensor& idx_NK) override;
  Tensor expert_rows() const override { return xp_MD_.rows(0, M_); }
  Tensor expert_offsets() const override { return offsets_G1_; }
  void combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND, bool accumulate) override;
  void combine_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                        Tensor& dyp_MD, Tensor& dgates_NK) override;
  void dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) override;

  // With a stream, the exchanges (the all-gathers, the alltoallv's) run on its communication
  // thread between *_start and *_finish, under the layer's independent compute; without one they
  // run in *_start.
  void set_stream(CommStream* stream) { xch_.set_stream(stream); }
  void dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) override;
  void dispatch_finish() override;
  void combine_start(const Tensor& yp_MD) override;
  void combine_finish(const Tensor& gates_NK, Tensor& y_ND, bool accumulate) override;
  void combine_backward_start(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                              Tensor& dgates_NK) override;
  void combine_backward_finish(Tensor& dyp_MD) override;
  void dispatch_backward_start(const Tensor& dxp_MD) override;
  void dispatch_backward_finish(Tensor& dx_ND) override;

  // Seconds spent in the exchanges, and the part the caller waited for (not hidden behind
  // compute), since the last reset. Named like AllToAllDispatcher's, so a caller reads both alike.
  double a2a_seconds() const { return xch_.seconds(); }
  double exposed_seconds() const { return xch_.exposed_seconds(); }
  void reset_timers() { xch_.reset_timers(); }

  // Bytes this rank sent to other ranks in dispatch and combine (forward and backward) since the
  // last reset, counted like AllToAllDispatcher::bytes_sent() (an all-gather of b bytes counts
  // b · (P - 1)): the x rows, expert outputs and row gradients, plus the gathered routing.
  int64_t bytes_sent() const { return bytes_sent_ + routing_bytes_sent_; }
  // The routing part of bytes_sent(): the all-gathered idx, N·K·4 · (P - 1) per dispatch (the
  // all-to-all's count exchange, which its bytes_sent() leaves out, is E·8 · (P - 1)/P).
  int64_t routing_bytes_sent() const { return routing_bytes_sent_; }
  void reset_bytes() { bytes_sent_ = routing_bytes_sent_ = 0; }

 private:
  // The alltoallv between sources and experts: to_experts sends rows in source order (grouped
  // by destination rank, then expert, then assignment) and receives them grouped by source rank,
  // then local expert, then assignment ("back order"); !to_experts is the return direction.
  void exchange(const Tensor& rows_in, Tensor& rows_out, bool to_experts);

  Communicator& comm_;
  int64_t E_, P_, local_, first_;
  int64_t N_ = 0, D_ = 0, K_ = 0, A_ = 0, M_ = 0;
  // the layout of the last dispatch, kept for combine and backward
  std::vector<int64_t> src_counts_;  // [E]: this rank's assignments per global expert
  std::vector<int64_t> seg_counts_;  // [local * P]: rows per (local expert, source rank)
  std::vector<int64_t> send_bytes_, send_off_, recv_bytes_, recv_off_;  // per peer, to_experts
  std::vector<int64_t> cursor_;         // [E + 1] counting-sort cursors of the source order
  std::vector<int64_t> seg_cursor_;     // [local * P] expert-order cursors
  std::vector<int64_t> back_cursor_;    // [P * local] back-order cursors
  Tensor slot_NK_;                      // row of assignment (n, k) in source order
  Tensor offsets_G1_;                   // segment boundaries in expert order
  Tensor xp_of_back_M_, back_of_xp_M_;  // permutation between back order and expert order
  Tensor xp_MD_;                        // rows at the experts
  Tensor returned_AD_;                  // expert outputs back at the source, source order
  // temporaries
  Tensor x_all_PND_, idx_all_PNK_;  // the group's tokens and routing, in rank order
  Tensor row_M_;                    // row of x_all of each expert row
  Tensor back_MD_, src_AD_;         // exchange buffers: back order, source order
  int64_t bytes_sent_ = 0, routing_bytes_sent_ = 0;
  AsyncExchange xch_;
};

}  // namespace moet
