// MpiCommunicator: the Communicator over an MPI communicator (OpenMPI on CPUs). world() starts
// MPI and its object finalises it; split() makes process groups. allreduce_sum is a
// reduce-scatter + allgather that adds the ranks' copies in tree_sum() order, so every rank and
// every layout gets the same bits (docs/parallel.md).
#pragma once
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace moet {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) and wraps a duplicate of
  // MPI_COMM_WORLD; the returned object finalises MPI when destroyed. Where MPI was already
  // initialised it wraps the world without finalising. Call once per process.
  static std::unique_ptr<MpiCommunicator> world(int* argc, char*** argv);
  // Whether the environment says this process was started by an MPI launcher (mpirun, mpiexec,
  // srun --mpi=pmix): OpenMPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, PMI's PMI_RANK/PMI_SIZE.
  // A plain `moet train` sees none of them and runs without MPI.
  static bool launched_under_mpi();

  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(float* x, int64_t n) override;
  void allreduce_sum(double* x, int64_t n) override;
  // Both move at most the scratch limit per round (the ranges go in pieces) through alltoallv.
  void reduce_scatter_sum_ranges(float* x, const int64_t* offsets) override;
  void allgather_ranges(float* x, const int64_t* offsets) override;
  void allgather(const void* send, int64_t bytes, void* recv) override;
  // Buffers must not overlap. Counts and offsets must agree between the pairs of ranks.
  void alltoallv(const void* send, const int64_t* send_bytes, const int64_t* send_offsets,
                 void* recv, const int64_t* recv_bytes, const int64_t* recv_offsets) override;
  void alltoall(const void* send, int64_t bytes, void* recv) override;
  void barrier() override;
  // On a duplicate of the communicator that returns errors instead of aborting, so a wrong
  // length becomes one moet::Error line. bytes must fit MPI's int.
  Message isend(const void* data, int64_t bytes, int peer, int tag) override;
  Message irecv(void* data, int64_t bytes, int peer, int tag) override;
  void wait(Message m) override;
  void progress() override;
  // color must be >= 0.
  std::unique_ptr<Communicator> split(int color, int key) override;
  // Prints "moet: rank R: <why>" (R = rank in the world) to stderr and calls
  // MPI_Abort(MPI_COMM_WORLD, 1): the launcher ends every process of the job.
  [[noreturn]] void abort(const std::string& why) override;

  MPI_Comm handle() const { return comm_; }
  // The thread support MPI granted: MPI_THREAD_MULTIPLE where available (OpenMPI 4 grants it),
  // else less; moet calls MPI from one thread at a time, which SERIALIZED covers.
  int thread_level() const { return thread_level_; }
  int world_rank() const { return world_rank_; }

  // Tuning, mostly for tests. allreduce_sum works in chunks whose scratch stays within
  // `bytes` (default 64 MiB; the buffer is allocated on first use and only grows).
  void set_scratch_limit_bytes(int64_t bytes);
  // The largest count or offset, in bytes, handed to one MPI collective (default INT_MAX, MPI's
  // int). Exchanges beyond it go as point-to-point pieces of at most this size.
  void set_max_message_bytes(int64_t bytes);

 private:
  MpiCommunicator(MPI_Comm comm, bool finalizes, int thread_level);
  static void wait_politely(MPI_Request* req);
  template <typename T>
  void allreduce_tree(T* x, int64_t n, MPI_Datatype type);
  void exchange_pairwise(const void* send, const int64_t* send_bytes, const int64_t* send_offsets,
                         void* recv, const int64_t* recv_bytes, const int64_t* recv_offsets);
  bool fits_one_call(const int64_t* a, const int64_t* b) const;
  void* scratch(int64_t bytes);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm p2p_ = MPI_COMM_NULL;  // point-to-point messages (errors returned, not fatal)
  struct P2pSlot {
    MPI_Request request = MPI_REQUEST_NULL;
    int64_t bytes = 0;
    int peer = 0, tag = 0;
    bool receive = false, busy = false;
  };
  std::vector<P2pSlot> p2p_slots_;
  std::vector<int64_t> p2p_free_;  // indices of idle slots
  Message start_p2p(bool receive, int64_t bytes, int peer, int tag);
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;
  bool finalizes_ = false;  // only the world object finalises MPI
  int thread_level_ = MPI_THREAD_SINGLE;
  int uncaught_at_start_ = 0;  // exceptions in flight when made (see the destructor)
  int64_t scratch_limit_bytes_ = int64_t{64} << 20;
  int64_t max_message_bytes_ = INT_MAX;
  std::vector<std::byte> scratch_;  // grow-only
  // Per-rank argument arrays for MPI calls, sized once.
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;
  std::vector<int64_t> i64_a_, i64_b_, i64_c_, i64_d_;
  std::vector<MPI_Request> requests_;
};

}  // namespace moet
