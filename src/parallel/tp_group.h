// CommunicatorTpGroup: a tensor-parallel layer's collectives (model/tensor_parallel.h, TpGroup)
// over a Communicator of the group's ranks — its deterministic allreduce_sum (the pairwise tree
// over ranks the layers' invariant sums continue) and its allgather.
#pragma once
#include "model/tensor_parallel.h"
#include "parallel/communicator.h"

namespace moet {

class CommunicatorTpGroup final : public TpGroup {
 public:
  explicit CommunicatorTpGroup(Communicator& group) : c_(group) {}
  void sum(float* x, int64_t n) override { c_.allreduce_sum(x, n); }
  void sum(double* x, int64_t n) override { c_.allreduce_sum(x, n); }
  void gather(const void* send, int64_t bytes, void* recv) override {
    c_.allgather(send, bytes, recv);
  }
  Communicator& communicator() const { return c_; }

 private:
  Communicator& c_;
};

}  // namespace moet
