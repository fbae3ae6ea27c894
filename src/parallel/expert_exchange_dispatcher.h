// ExpertExchangeDispatcher: what every expert-parallel dispatcher shares. Experts sit in equal
// contiguous blocks over the ranks of the expert-parallel group. A dispatcher derived from it
// brings the rows to the experts its own way (all-to-all, all-gather) and leaves them in expert
// order — local expert, then source rank, then token order — with the permutation to and from
// "receive order" (by source rank, then local expert, then assignment). From there the return
// path is common: outputs go back to their source by an all-to-all and are summed there with
// the gates in k order; the backward passes are the transposes. The layout of a call stays here
// for combine and backward.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "model/dispatcher.h"
#include "parallel/async_exchange.h"
#include "parallel/communicator.h"

namespace moet {

class ExpertExchangeDispatcher : public TokenDispatcher {
 public:
  ExpertExchangeDispatcher(Communicator& ep_group, int64_t n_experts);

  int64_t max_expert_rows() const override { return xp_MD_.size(0); }
  int64_t first_local_expert() const override { return first_; }
  int64_t num_local_experts() const override { return local_; }
  int64_t segments_per_expert() const override { return P_; }
  Tensor expert_rows() const override { return xp_MD_.rows(0, M_); }
  Tensor expert_offsets() const override { return offsets_G1_; }
  const float* segment_amax() const override { return amax_G_.empty() ? nullptr : amax_G_.f32(); }

  void dispatch(const Tensor& x_ND, const Tensor& idx_NK) override;
  void combine(const Tensor& yp_MD, const Tensor& gates_NK, Tensor& y_ND, bool accumulate) override;
  void combine_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                        Tensor& dyp_MD, Tensor& dgates_NK) override;
  void dispatch_backward(const Tensor& dxp_MD, Tensor& dx_ND) override;

  // With a stream, the exchanges run on its communication thread between *_start and *_finish,
  // under the layer's independent compute; without one they run in *_start.
  void set_stream(CommStream* stream) { xch_.set_stream(stream); }
  // Records the exchanges as trace::kDispatch / kCombine spans (AsyncExchange::set_trace).
  void set_trace(TraceRecorder* rec) { xch_.set_trace(rec); }
  void combine_start(const Tensor& yp_MD) override;
  void combine_finish(const Tensor& gates_NK, Tensor& y_ND, bool accumulate) override;
  void combine_backward_start(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& gates_NK,
                              Tensor& dgates_NK) override;
  void combine_backward_finish(Tensor& dyp_MD) override;
  void dispatch_backward_start(const Tensor& dxp_MD) override;
  void dispatch_backward_finish(Tensor& dx_ND) override;

  // Seconds in the exchanges, and the part the caller waited for (not hidden behind compute),
  // since the last reset.
  double a2a_seconds() const { return xch_.seconds(); }
  double exposed_seconds() const { return xch_.exposed_seconds(); }
  void reset_timers() { xch_.reset_timers(); }

  // Payload bytes this rank sent to other ranks in dispatch and combine (forward and backward)
  // since the last reset, as they travel (FP8 codes and scales, bf16 or fp32 rows: the payload
  // formats); the part that left the node (ranks_per_node); routing metadata sent.
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_sent_other_nodes() const { return bytes_sent_other_nodes_; }
  int64_t routing_bytes_sent() const { return routing_bytes_sent_; }
  void reset_bytes() {
    bytes_sent_ = bytes_sent_other_nodes_ = routing_bytes_sent_ = rows_received_ = 0;
  }
  // Collective over the expert-parallel group: the largest and the mean over its ranks of the
  // expert rows each received since the last reset_bytes (the busiest rank's expert work
  // against a balanced share).
  std::pair<double, double> rows_received_max_mean();

  // Consecutive ranks of the group that share a node (default: all). With n_group equal to the
  // number of nodes, group-limited routing is node-limited routing: a token reaches at most
  // topk_group nodes (max_nodes_per_token() of the last dispatch).
  void set_ranks_per_node(int64_t r);
  int64_t max_nodes_per_token() const { return max_nodes_per_token_; }

 protected:
  // Allocates the common layout and buffers for N tokens of width D, K experts each.
  void plan_common(Workspace& ws, int64_t D, int64_t K);
  // Source order of this rank's assignments: by global expert (so destination rank, then local
  // expert), then assignment. Fills send_counts_ and slot_NK_ (and token_of_row[pos] = source
  // token, when given); records the nodes each token reaches.
  void sort_sources(const Tensor& idx_NK, int32_t* token_of_row);
  // Row counts of the source ↔ expert exchange, from this rank's send counts and the rows it
  // receives from each (source p, local expert l); sets M_.
  template <typename RecvRows>
  void layout_exchange(const RecvRows& recv_rows);
  // The alltoallv of rows of row_bytes each: forward sends source order and receives receive
  // order; !forward returns.
  void exchange(const void* rows_in, void* rows_out, bool forward, int64_t row_bytes);
  // The bytes that exchange sends to other ranks (for the trace's bytes in flight).
  int64_t exchange_bytes(bool forward, int64_t row_bytes) const;
  // Rows packed for the wire in `fmt` (F32: the rows as they are): encode before an exchange is
  // issued, decode after it completed. wire_send_/wire_recv_ hold the packed rows of the source
  // and the expert side.
  int64_t row_bytes(ops::Format fmt) const { return ops::wire_row_bytes(D_, fmt); }

  Communicator& comm_;
  int64_t E_, P_, local_, first_;
  int64_t N_ = 0, D_ = 0, K_ = 0, A_ = 0, M_ = 0;
  std::vector<int64_t> send_counts_;            // [E]: this rank's assignments per global expert
  std::vector<int64_t> cursor_;                 // [E + 1]: counting-sort cursors
  std::vector<int64_t> send_rows_, recv_rows_;  // per peer
  std::vector<int64_t> send_bytes_, send_off_, recv_bytes_, recv_off_;  // per peer, one exchange
  Tensor slot_NK_;                          // row of assignment (n, k) in source order
  Tensor offsets_G1_;                       // segment boundaries in expert order
  Tensor xp_from_recv_M_, recv_from_xp_M_;  // permutation between receive and expert order
  Tensor xp_MD_;                            // rows at the experts
  Tensor returned_AD_;                      // expert outputs back at the source, source order
  Tensor send_AD_, recv_MD_;                // exchange buffers: source order, receive order
  Tensor wire_send_, wire_recv_;            // packed rows (U8) when a payload format is not fp32
  Tensor amax_G_;                           // FP4 dispatch: each segment's amax, expert order
  int64_t bytes_sent_ = 0, bytes_sent_other_nodes_ = 0, routing_bytes_sent_ = 0;
  int64_t rows_received_ = 0;
  std::vector<int64_t> rows_of_rank_;  // rows_received_max_mean's gather buffer
  int64_t ranks_per_node_ = 0, max_nodes_per_token_ = 0;
  AsyncExchange xch_;
};

template <typename RecvRows>
void ExpertExchangeDispatcher::layout_exchange(const RecvRows& recv_rows) {
  int64_t ro = 0;
  for (int64_t p = 0; p < P_; ++p) {
    int64_t s = 0, r = 0;
    for (int64_t l = 0; l < local_; ++l) {
      s += send_counts_[p * local_ + l];
      r += recv_rows(p, l);
    }
    send_rows_[p] = s;
    recv_rows_[p] = r;
    ro += r;
  }
  M_ = ro;
  rows_received_ += M_;
  MOET_ASSERT(M_ <= xp_MD_.size(0));
}

}  // namespace moet
