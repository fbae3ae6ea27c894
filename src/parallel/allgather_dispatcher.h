// AllGatherDispatcher: expert parallelism by all-gather (`--dispatcher allgather`). Every rank of
// the expert-parallel group all-gathers the group's routing and token rows (once per token, not
// per (token, k)) and keeps the rows routed to its own experts, in the same expert order as the
// all-to-all dispatcher; outputs return by ExpertExchangeDispatcher's all-to-all. The results
// are bitwise those of AllToAllDispatcher; it sends fewer bytes when K > the group size.
#pragma once
#include "parallel/expert_exchange_dispatcher.h"

namespace moet {

class AllGatherDispatcher final : public ExpertExchangeDispatcher {
 public:
  AllGatherDispatcher(Communicator& ep_group, int64_t n_experts);
  void plan(Workspace& ws, int64_t D, int64_t K) override;
  // bytes_sent() counts an all-gather of b bytes as b · (P - 1) and includes the gathered
  // routing (routing_bytes_sent(): N·K·4 · (P - 1) per dispatch).
  void dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) override;
  void dispatch_finish() override;

 private:
  std::vector<int64_t> seg_counts_;   // [local * P]: rows per (local expert, source rank)
  std::vector<int64_t> seg_cursor_;   // [local * P] expert-order cursors
  std::vector<int64_t> recv_cursor_;  // [P * local] receive-order cursors
  Tensor x_all_PND_, idx_all_PNK_;    // the group's tokens and routing, in rank order
  Tensor row_M_;                      // row of x_all of each expert row
};

}  // namespace moet
