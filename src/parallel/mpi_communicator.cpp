#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <thread>

#include "core/error.h"

namespace moet {

namespace {

constexpr int kPieceTag = 0x6d6f;  // point-to-point pieces of oversized exchanges

int to_int(int64_t v) { return static_cast<int>(v); }

}  // namespace

bool MpiCommunicator::launched_under_mpi() {
  for (const char* var :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      MOET_FAIL("MPI_Init_thread failed; was this started by mpirun?");
  } else {
    MPI_Query_thread(&provided);
  }
  // A failed MPI call ends the job (the default, made explicit): nothing waits on a dead peer.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(dup, !initialized, provided));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool finalizes, int thread_level)
    : comm_(comm),
      finalizes_(finalizes),
      thread_level_(thread_level),
      uncaught_at_start_(std::uncaught_exceptions()) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_dup(comm_, &p2p_);
  MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  const size_t p = static_cast<size_t>(size_);
  send_counts_.resize(p);
  send_displs_.resize(p);
  recv_counts_.resize(p);
  recv_displs_.resize(p);
  i64_a_.resize(p);
  i64_b_.resize(p);
  i64_c_.resize(p);
  i64_d_.resize(p);
  requests_.resize(2 * p);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // a group that outlived the world: MPI already released it
  if (finalizes_ && std::uncaught_exceptions() > uncaught_at_start_) {
    // An error is unwinding past the world: other ranks may be waiting for this one inside a
    // collective, and MPI_Finalize would wait for them forever. End the job instead.
    abort("an exception is leaving the scope of the MPI world (catch it and call abort)");
  }
  if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  if (finalizes_) MPI_Finalize();
}

void MpiCommunicator::set_scratch_limit_bytes(int64_t bytes) {
  MOET_CHECK(bytes > 0, "scratch limit must be positive, got ", bytes);
  scratch_limit_bytes_ = bytes;
}

void MpiCommunicator::set_max_message_bytes(int64_t bytes) {
  MOET_CHECK(bytes > 0 && bytes <= INT_MAX, "max message bytes must be in [1, ", INT_MAX, "], got ",
             bytes);
  max_message_bytes_ = bytes;
}

void* MpiCommunicator::scratch(int64_t bytes) {
  if (static_cast<int64_t>(scratch_.size()) < bytes) {
    scratch_.clear();
    scratch_.shrink_to_fit();
    scratch_.resize(static_cast<size_t>(bytes));
  }
  return scratch_.data();
}

// Reduce-scatter + allgather. Per chunk of m elements, rank p owns the slice
// [m*p/P, m*(p+1)/P). An alltoallv hands every rank the P copies of its slice, the rank adds them
// in tree_sum() order over ranks, and an allgatherv puts the summed slices back on every rank.
template <typename T>
void MpiCommunicator::allreduce_tree(T* x, int64_t n, MPI_Datatype type) {
  MOET_CHECK(n >= 0, "allreduce_sum: negative length ", n);
  if (size_ == 1 || n == 0) return;
  const int64_t p_count = size_;
  // Chunk: a multiple of P elements whose P slices fit the scratch limit and MPI's int.
  int64_t chunk =
      std::min<int64_t>(scratch_limit_bytes_ / static_cast<int64_t>(sizeof(T)), INT_MAX / 2);
  chunk = std::max<int64_t>(chunk / p_count * p_count, p_count);
  T* buf = static_cast<T*>(scratch(std::min(chunk, n + p_count) * static_cast<int64_t>(sizeof(T))));
  for (int64_t base = 0; base < n; base += chunk) {
    const int64_t m = std::min(chunk, n - base);
    T* xc = x + base;
    for (int p = 0; p < size_; ++p) {
      const int64_t lo = m * p / p_count;
      const int64_t hi = m * (p + 1) / p_count;
      send_counts_[p] = to_int(hi - lo);
      send_displs_[p] = to_int(lo);
    }
    const int64_t my_lo = send_displs_[rank_];
    const int64_t my_len = send_counts_[rank_];
    for (int p = 0; p < size_; ++p) {
      recv_counts_[p] = to_int(my_len);
      recv_displs_[p] = to_int(my_len * p);
    }
    MPI_Request req;
    MPI_Ialltoallv(xc, send_counts_.data(), send_displs_.data(), type, buf, recv_counts_.data(),
                   recv_displs_.data(), type, comm_, &req);
    wait_politely(&req);
    if (my_len > 0) tree_sum_arrays(buf, size_, my_len, xc + my_lo);
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, xc, send_counts_.data(),
                    send_displs_.data(), type, comm_, &req);
    wait_politely(&req);
  }
}

void MpiCommunicator::allreduce_sum(float* x, int64_t n) { allreduce_tree(x, n, MPI_FLOAT); }
void MpiCommunicator::allreduce_sum(double* x, int64_t n) { allreduce_tree(x, n, MPI_DOUBLE); }

namespace {
void check_offsets(const int64_t* offsets, int size, const char* what) {
  MOET_CHECK(offsets[0] >= 0, what, ": negative offset ", offsets[0]);
  for (int p = 0; p < size; ++p)
    MOET_CHECK(offsets[p + 1] >= offsets[p], what, ": offsets decrease at rank ", p);
}
int64_t clamp_len(int64_t left, int64_t piece) { return std::clamp<int64_t>(left, 0, piece); }
}  // namespace

// Rank p's range goes in pieces of at most `piece` elements: in each round every rank sends
// its copy of piece k of p's range to p (one alltoallv), and p adds the P copies with the same
// tree_sum_arrays as allreduce_tree, so every element sees the same additions in the same order.
void MpiCommunicator::reduce_scatter_sum_ranges(float* x, const int64_t* offsets) {
  check_offsets(offsets, size_, "reduce_scatter_sum");
  if (size_ == 1) return;
  const int64_t sz = sizeof(float);
  int64_t longest = 0;
  for (int p = 0; p < size_; ++p) longest = std::max(longest, offsets[p + 1] - offsets[p]);
  if (longest == 0) return;
  const int64_t piece = std::min(longest, std::max<int64_t>(scratch_limit_bytes_ / sz / size_, 1));
  float* buf = static_cast<float*>(scratch(piece * size_ * sz));
  const int64_t my_lo = offsets[rank_], my_len = offsets[rank_ + 1] - my_lo;
  for (int64_t done = 0; done < longest; done += piece) {
    const int64_t mine = clamp_len(my_len - done, piece);
    for (int p = 0; p < size_; ++p) {
      i64_a_[p] = clamp_len(offsets[p + 1] - offsets[p] - done, piece) * sz;
      i64_b_[p] = (offsets[p] + done) * sz;
      i64_c_[p] = mine * sz;
      i64_d_[p] = mine * p * sz;
    }
    alltoallv(x, i64_a_.data(), i64_b_.data(), buf, i64_c_.data(), i64_d_.data());
    if (mine > 0) tree_sum_arrays(buf, size_, mine, x + my_lo + done);
  }
}

// Each round, this rank's next piece goes through scratch (send and receive buffers of an
// alltoallv must not overlap) to every rank.
void MpiCommunicator::allgather_ranges(float* x, const int64_t* offsets) {
  check_offsets(offsets, size_, "allgather_ranges");
  if (size_ == 1) return;
  const int64_t sz = sizeof(float);
  int64_t longest = 0;
  for (int p = 0; p < size_; ++p) longest = std::max(longest, offsets[p + 1] - offsets[p]);
  if (longest == 0) return;
  const int64_t piece = std::min(longest, std::max<int64_t>(scratch_limit_bytes_ / sz, 1));
  float* buf = static_cast<float*>(scratch(piece * sz));
  const int64_t my_lo = offsets[rank_], my_len = offsets[rank_ + 1] - my_lo;
  for (int64_t done = 0; done < longest; done += piece) {
    const int64_t mine = clamp_len(my_len - done, piece);
    if (mine > 0) std::memcpy(buf, x + my_lo + done, static_cast<size_t>(mine * sz));
    for (int p = 0; p < size_; ++p) {
      i64_a_[p] = mine * sz;
      i64_b_[p] = 0;
      i64_c_[p] = clamp_len(offsets[p + 1] - offsets[p] - done, piece) * sz;
      i64_d_[p] = (offsets[p] + done) * sz;
    }
    alltoallv(buf, i64_a_.data(), i64_b_.data(), x, i64_c_.data(), i64_d_.data());
  }
}

bool MpiCommunicator::fits_one_call(const int64_t* a, const int64_t* b) const {
  for (int p = 0; p < size_; ++p) {
    if (a[p] > max_message_bytes_ || b[p] > max_message_bytes_) return false;
  }
  return true;
}

// Oversized exchanges: each pair's bytes go in pieces of at most max_message_bytes_, one piece
// per peer and direction per round. Pieces between two ranks match in order (MPI does not
// overtake messages with the same tag), so the ranks need not agree on the number of rounds.
void MpiCommunicator::exchange_pairwise(const void* send, const int64_t* send_bytes,
                                        const int64_t* send_offsets, void* recv,
                                        const int64_t* recv_bytes, const int64_t* recv_offsets) {
  const char* s = static_cast<const char*>(send);
  char* r = static_cast<char*>(recv);
  const int64_t piece = max_message_bytes_;
  MOET_CHECK(send_bytes[rank_] == recv_bytes[rank_], "alltoallv: rank ", rank_, " sends ",
             send_bytes[rank_], " bytes to itself but expects ", recv_bytes[rank_]);
  if (send_bytes[rank_] > 0)
    std::memcpy(r + recv_offsets[rank_], s + send_offsets[rank_],
                static_cast<size_t>(send_bytes[rank_]));
  for (int64_t done = 0;; done += piece) {
    int count = 0;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || recv_bytes[p] <= done) continue;
      const int len = to_int(std::min(piece, recv_bytes[p] - done));
      MPI_Irecv(r + recv_offsets[p] + done, len, MPI_BYTE, p, kPieceTag, comm_,
                &requests_[count++]);
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || send_bytes[p] <= done) continue;
      const int len = to_int(std::min(piece, send_bytes[p] - done));
      MPI_Isend(s + send_offsets[p] + done, len, MPI_BYTE, p, kPieceTag, comm_,
                &requests_[count++]);
    }
    if (count == 0) break;
    MPI_Waitall(count, requests_.data(), MPI_STATUSES_IGNORE);
  }
}

void MpiCommunicator::alltoallv(const void* send, const int64_t* send_bytes,
                                const int64_t* send_offsets, void* recv, const int64_t* recv_bytes,
                                const int64_t* recv_offsets) {
  for (int p = 0; p < size_; ++p) {
    MOET_CHECK(
        send_bytes[p] >= 0 && send_offsets[p] >= 0 && recv_bytes[p] >= 0 && recv_offsets[p] >= 0,
        "alltoallv: negative count or offset for rank ", p);
  }
  if (!fits_one_call(send_bytes, send_offsets) || !fits_one_call(recv_bytes, recv_offsets)) {
    exchange_pairwise(send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
    return;
  }
  for (int p = 0; p < size_; ++p) {
    send_counts_[p] = to_int(send_bytes[p]);
    send_displs_[p] = to_int(send_offsets[p]);
    recv_counts_[p] = to_int(recv_bytes[p]);
    recv_displs_[p] = to_int(recv_offsets[p]);
  }
  MPI_Request req;
  MPI_Ialltoallv(send, send_counts_.data(), send_displs_.data(), MPI_BYTE, recv,
                 recv_counts_.data(), recv_displs_.data(), MPI_BYTE, comm_, &req);
  wait_politely(&req);
}

// Waits for a request without holding a core: MPI's own blocking waits spin in the progress
// loop, which on a machine with no spare core takes it from compute (the communication thread
// waits here while the compute thread works). Polls quickly for a short while, then sleeps
// 20 µs between polls; each poll also progresses the transfer.
void MpiCommunicator::wait_politely(MPI_Request* req) {
  int done = 0;
  for (int i = 0; i < 64 && !done; ++i) MPI_Test(req, &done, MPI_STATUS_IGNORE);
  while (!done) {
    struct timespec ts {
      0, 20000
    };
    nanosleep(&ts, nullptr);
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
  }
}

void MpiCommunicator::allgather(const void* send, int64_t bytes, void* recv) {
  MOET_CHECK(bytes >= 0, "allgather: negative byte count ", bytes);
  if (bytes <= max_message_bytes_) {
    MPI_Allgather(send, to_int(bytes), MPI_BYTE, recv, to_int(bytes), MPI_BYTE, comm_);
    return;
  }
  for (int p = 0; p < size_; ++p) {
    i64_a_[p] = bytes;
    i64_b_[p] = 0;
    i64_c_[p] = bytes * p;
  }
  exchange_pairwise(send, i64_a_.data(), i64_b_.data(), recv, i64_a_.data(), i64_c_.data());
}

void MpiCommunicator::alltoall(const void* send, int64_t bytes, void* recv) {
  MOET_CHECK(bytes >= 0, "alltoall: negative byte count ", bytes);
  if (bytes <= max_message_bytes_) {
    MPI_Alltoall(send, to_int(bytes), MPI_BYTE, recv, to_int(bytes), MPI_BYTE, comm_);
    return;
  }
  for (int p = 0; p < size_; ++p) {
    i64_a_[p] = bytes;
    i64_b_[p] = bytes * p;
  }
  exchange_pairwise(send, i64_a_.data(), i64_b_.data(), recv, i64_a_.data(), i64_b_.data());
}

void MpiCommunicator::barrier() { MPI_Barrier(comm_); }

Communicator::Message MpiCommunicator::start_p2p(bool receive, int64_t bytes, int peer, int tag) {
  MOET_CHECK(peer >= 0 && peer < size_, "point-to-point peer ", peer,
             " is not a rank of this group of ", size_);
  MOET_CHECK(bytes >= 0 && bytes <= INT_MAX && tag >= 0, "point-to-point message of ", bytes,
             " bytes, tag ", tag, ": out of range");
  if (p2p_free_.empty()) {
    p2p_free_.push_back(int64_t(p2p_slots_.size()));
    p2p_slots_.emplace_back();
  }
  const Message m = p2p_free_.back();
  p2p_free_.pop_back();
  P2pSlot& slot = p2p_slots_[size_t(m)];
  slot.bytes = bytes, slot.peer = peer, slot.tag = tag, slot.receive = receive, slot.busy = true;
  return m;
}

Communicator::Message MpiCommunicator::isend(const void* data, int64_t bytes, int peer, int tag) {
  const Message m = start_p2p(false, bytes, peer, tag);
  MPI_Isend(data, int(bytes), MPI_BYTE, peer, tag, p2p_, &p2p_slots_[size_t(m)].request);
  return m;
}

Communicator::Message MpiCommunicator::irecv(void* data, int64_t bytes, int peer, int tag) {
  const Message m = start_p2p(true, bytes, peer, tag);
  MPI_Irecv(data, int(bytes), MPI_BYTE, peer, tag, p2p_, &p2p_slots_[size_t(m)].request);
  return m;
}

void MpiCommunicator::wait(Message m) {
  MOET_CHECK(m >= 0 && size_t(m) < p2p_slots_.size() && p2p_slots_[size_t(m)].busy,
             "wait: no point-to-point message ", m, " in flight");
  P2pSlot& slot = p2p_slots_[size_t(m)];
  MPI_Status status;
  int done = 0;
  int rc = MPI_SUCCESS;
  for (int polls = 0; rc == MPI_SUCCESS && !done; ++polls) {  // as wait_politely, errors kept
    rc = MPI_Test(&slot.request, &done, &status);
    if (!done && polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  slot.busy = false;
  p2p_free_.push_back(m);
  const char* dir = slot.receive ? "from" : "to";
  if (rc != MPI_SUCCESS) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    MOET_CHECK(cls != MPI_ERR_TRUNCATE, "rank ", rank_, ": the message from rank ", slot.peer,
               " (tag ", slot.tag, ") is longer than the ", slot.bytes,
               " bytes expected: the stages disagree on a tensor's shape");
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    MOET_FAIL("rank ", rank_, ": point-to-point message ", dir, " rank ", slot.peer, " (tag ",
              slot.tag, ") failed: ", std::string(text, size_t(len)));
  }
  if (slot.receive) {
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    MOET_CHECK(got == slot.bytes, "rank ", rank_, ": the message from rank ", slot.peer, " (tag ",
               slot.tag, ") holds ", got, " bytes, not the ", slot.bytes,
               " expected: the stages disagree on a tensor's shape");
  }
}

void MpiCommunicator::progress() {
  int flag = 0;  // a probe runs OpenMPI's progress engine for every request in flight
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, p2p_, &flag, MPI_STATUS_IGNORE);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MOET_CHECK(color >= 0, "split: color must be >= 0, got ", color);
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &group);
  auto out = std::unique_ptr<MpiCommunicator>(new MpiCommunicator(group, false, thread_level_));
  out->scratch_limit_bytes_ = scratch_limit_bytes_;
  out->max_message_bytes_ = max_message_bytes_;
  return out;
}

void MpiCommunicator::abort(const std::string& why) {
  std::fprintf(stderr, "moet: rank %d: %s\n", world_rank_, why.c_str());
  std::fflush(nullptr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace moet
