// AllToAllDispatcher: expert parallelism by all-to-all. dispatch sends every (token, k) row to
// the rank holding its expert (an all-to-all of counts, then of the payload); the return path
// (combine and the backward passes) is ExpertExchangeDispatcher's.
//
// Rows reach the experts grouped by local expert, then by source rank, then in token order, and
// each (expert, source) segment is multiplied on its own, so every row sees exactly the GEMM it
// would see with all experts local: the numbers do not depend on the expert-parallel size.
// Under an FP4 dispatch format the source quantizes each segment it sends (the rows to one
// expert) and sends E2M1 codes and block scales, with the segment's amax beside the counts.
#pragma once
#include "parallel/expert_exchange_dispatcher.h"

namespace moet {

class AllToAllDispatcher final : public ExpertExchangeDispatcher {
 public:
  AllToAllDispatcher(Communicator& ep_group, int64_t n_experts);
  void plan(Workspace& ws, int64_t D, int64_t K) override;
  void dispatch_start(const Tensor& x_ND, const Tensor& idx_NK) override;
  void dispatch_finish() override;

 private:
  std::vector<int64_t> recv_counts_;  // [P * local]: rows per (source rank, local expert)
  // FP4 dispatch: the amax of each segment sent ([E], by global expert) and received ([P * local])
  std::vector<float> send_amax_, recv_amax_;
  Tensor send_token_A_;  // source token of each send row
};

}  // namespace moet
