// LocalCommunicator: the one-process communicator (size 1, rank 0). Collectives are copies or
// nothing, so single-process code runs through the same calls as a distributed run.
#pragma once
#include "parallel/communicator.h"

namespace moet {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void reduce_scatter_sum_ranges(float*, const int64_t*) override {}
  void allgather_ranges(float*, const int64_t*) override {}
  void allgather(const void* send, int64_t bytes, void* recv) override;
  void alltoallv(const void* send, const int64_t* send_bytes, const int64_t* send_offsets,
                 void* recv, const int64_t* recv_bytes, const int64_t* recv_offsets) override;
  void alltoall(const void* send, int64_t bytes, void* recv) override;
  void barrier() override {}
  // One process has no peer: point-to-point messages are an error.
  Message isend(const void*, int64_t, int peer, int) override;
  Message irecv(void*, int64_t, int peer, int) override;
  void wait(Message) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  // Prints "moet: rank 0: <why>" to stderr and ends the process with status 1, running no
  // destructors (other threads may still be inside the step).
  [[noreturn]] void abort(const std::string& why) override;
};

}  // namespace moet
