// AllToAllDispatcher: expert parallelism over a Communicator. The routed experts are split into
// equal contiguous blocks over the ranks of the expert-parallel group; dispatch sends every
// (token, k) row to the rank holding its expert (an all-to-all of counts, then of the payload),
// combine brings the expert outputs back and sums them with the gates at the source. The layout
// of a call (the "handle") stays in the dispatcher for combine and for backward: the backward of
// dispatch is a combine of row gradients, the backward of combine a dispatch.
//
// Rows reach the experts grouped by local expert, then by source rank, then in token order, and
// each (expert, source) segment is multiplied on its own, so every row sees exactly the GEMM it
// would see with all experts local: the numbers do not depend on the expert-parallel size.
#pragma once
#include <cstdint>
#include <vector>

#include "model/dispatcher.h"
#include "parallel/async_exchange.h"
#include "parallel/communicator.h"

namespace moet {

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  AllToAllDispatcher(Communicator& ep_group, int64_t n_experts);
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

  // With a stream, the payload exchanges run on its communication thread between *_start and
  // *_finish, under the layer's independent compute; without one they run in *_start.
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

  // Seconds spent in the payload exchanges, and the part the caller waited for (not hidden
  // behind compute), since the last reset.
  double a2a_seconds() const { return xch_.seconds(); }
  double exposed_seconds() const { return xch_.exposed_seconds(); }
  void reset_timers() { xch_.reset_timers(); }

  // Payload bytes this rank sent to other ranks in dispatch and combine (forward and backward)
  // since the last reset.
  int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes() { bytes_sent_ = bytes_sent_other_nodes_ = 0; }

  // Ranks of the expert-parallel group that share a node (consecutive ranks; default: all), so
  // that traffic can be told apart: bytes_sent_other_nodes() is the part of bytes_sent() that
  // left the node. With n_group equal to the number of nodes, group-limited routing is
  // node-limited routing: a token reaches at most topk_group nodes (max_nodes_per_token()).
  void set_ranks_per_node(int64_t r);
  int64_t bytes_sent_other_nodes() const { return bytes_sent_other_nodes_; }
  // The most nodes any token of the last dispatch was sent to.
  int64_t max_nodes_per_token() const { return max_nodes_per_token_; }

 private:
  // Sends rows in send order (grouped by destination) and receives rows in receive order
  // (grouped by source), or the reverse direction; row width D floats.
  void exchange(const Tensor& rows_in, Tensor& rows_out, bool forward);
  // Starts exchange(rows_in → rows_out) through xch_.
  void issue(const Tensor& rows_in, Tensor rows_out, bool forward);

  Communicator& comm_;
  int64_t E_, P_, local_, first_;
  int64_t D_ = 0, A_ = 0, M_ = 0;
  // the layout of the last dispatch, kept for combine and backward
  std::vector<int64_t> send_counts_, recv_counts_;  // [P * local]: rows per (peer, local expert)
  std::vector<int64_t> send_bytes_, send_off_, recv_bytes_, recv_off_;  // per peer
  std::vector<int64_t> cursor_;                                         // counting-sort cursors
  Tensor slot_NK_;                          // row of assignment (n, k) in send order
  Tensor send_token_A_;                     // source token of each send row
  Tensor xp_from_recv_M_, recv_from_xp_M_;  // permutation between receive and expert order
  Tensor offsets_G1_;                       // segment boundaries in expert order
  Tensor xp_MD_;                            // rows at the experts
  Tensor returned_AD_;                      // expert outputs back at the source, send order
  // temporaries
  Tensor send_AD_, recv_MD_;
  int64_t bytes_sent_ = 0, bytes_sent_other_nodes_ = 0;
  int64_t ranks_per_node_ = 0, max_nodes_per_token_ = 0;
  AsyncExchange xch_;
};

}  // namespace moet
