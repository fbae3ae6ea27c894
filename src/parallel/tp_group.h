// CommunicatorTpGroup: a tensor-parallel layer's collectives (model/tensor_parallel.h, TpGroup)
// over a Communicator of the group's ranks — its deterministic allreduce_sum (the pairwise tree
// over ranks the layers' invariant sums continue), its reduce-scatter in the same order, and its
// allgather. It times them and counts
// the bytes this rank sends (the step's tp_comm_s and tp_bytes metrics), and records each in the
// trace's "tp" category on the compute lane.
#pragma once
#include <cstdint>

#include "core/trace.h"
#include "model/tensor_parallel.h"
#include "parallel/communicator.h"

namespace moet {

class CommunicatorTpGroup final : public TpGroup {
 public:
  explicit CommunicatorTpGroup(Communicator& group) : c_(group) {}
  void sum(float* x, int64_t n) override;
  void sum(double* x, int64_t n) override;
  void gather(const void* send, int64_t bytes, void* recv) override;
  void sum_scatter(float* x, int64_t n) override;
  Communicator& communicator() const { return c_; }

  void set_trace(TraceRecorder* trace);
  // Seconds in the group's collectives and bytes this rank sent since the last take (reset).
  double take_seconds();
  int64_t take_bytes();

 private:
  // An allreduce of n elements of `width` bytes: the reduce-scatter sends every slice but this
  // rank's, the all-gather this rank's slice to every other rank (MpiCommunicator).
  int64_t sum_bytes(int64_t n, int64_t width) const;
  template <typename T>
  void timed_sum(T* x, int64_t n);

  Communicator& c_;
  TraceRecorder* trace_ = nullptr;
  int lane_ = 0;
  double seconds_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace moet
