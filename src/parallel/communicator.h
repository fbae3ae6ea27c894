// Communicator: every collective moet uses, behind one interface — LocalCommunicator (one
// process), MpiCommunicator (OpenMPI on CPUs); an NCCL one drops in for GPUs. Process groups
// are communicators made by split().
//
// Determinism: allreduce_sum adds the ranks' contributions in one canonical order — a pairwise
// tree over the ranks of the group in rank order, tree_sum() below — so every rank gets the
// same bits, and a layout whose groups are aligned power-of-two blocks of the world reproduces
// the bits of a flat reduction (expert parallelism does not change the numbers).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tree_sum.h"

namespace moet {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // x[i] = Σ over ranks of x[i], summed in the canonical tree order, the same bits everywhere.
  virtual void allreduce_sum(float* x, int64_t n) = 0;
  virtual void allreduce_sum(double* x, int64_t n) = 0;
  // Reduce-scatter in the canonical order. offsets has size() + 1 non-decreasing entries, the
  // same on every rank: afterwards x[offsets[r], offsets[r+1]) on rank r holds the sum over ranks,
  // bit for bit what allreduce_sum leaves there (each element's copies are added in tree_sum
  // order whatever the slicing); the rest of x is unchanged.
  virtual void reduce_scatter_sum_ranges(float* x, const int64_t* offsets) = 0;
  // The same with the even split: this rank's slice [n·r/P, n·(r+1)/P), reported in *begin and
  // *count.
  void reduce_scatter_sum(float* x, int64_t n, int64_t* begin, int64_t* count);
  // In-place allgather of ranges: x[offsets[p], offsets[p+1]) of rank p lands at the same place
  // on every rank (offsets as above).
  virtual void allgather_ranges(float* x, const int64_t* offsets) = 0;
  // recv = the ranks' `bytes` each, in rank order (recv holds size() * bytes).
  virtual void allgather(const void* send, int64_t bytes, void* recv) = 0;
  // Personalised exchange: send_bytes[p] bytes from send + send_offsets[p] go to rank p;
  // recv_bytes[p] bytes from rank p land at recv + recv_offsets[p]. Arrays have size() entries.
  virtual void alltoallv(const void* send, const int64_t* send_bytes, const int64_t* send_offsets,
                         void* recv, const int64_t* recv_bytes, const int64_t* recv_offsets) = 0;
  // Same-size exchange: `bytes` to and from every rank, blocks in rank order.
  virtual void alltoall(const void* send, int64_t bytes, void* recv) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new communicator, ordered by key (then by rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Point-to-point messages (pipeline stages): started without waiting, finished by wait().
  // A message is `bytes` long and matched by (peer, tag); a receive that finds a message of
  // another length throws moet::Error naming the peer, the tag and both lengths (a stage fed
  // the wrong shape fails loudly instead of hanging or reading garbage). Handles are reused:
  // starting and waiting allocate nothing once as many messages were in flight before. The peer
  // may be this rank (a V schedule's two chunks on one rank).
  using Message = int64_t;
  virtual Message isend(const void* data, int64_t bytes, int peer, int tag) = 0;
  virtual Message irecv(void* data, int64_t bytes, int peer, int tag) = 0;
  virtual void wait(Message m) = 0;
  // Lets the messages in flight move without waiting for any (a rendezvous handshake over TCP
  // needs the sender inside MPI); cheap enough to call between a pipeline stage's layers.
  virtual void progress() {}
  // Ends every process of the job with a message naming this rank and the reason; never returns.
  [[noreturn]] virtual void abort(const std::string& why) = 0;
};

// The even split of n elements over p ranks: offsets[r] = n·r/p, r = 0..p.
std::vector<int64_t> even_offsets(int64_t n, int p);

}  // namespace moet
