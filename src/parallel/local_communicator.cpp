#include "parallel/local_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace moet {

namespace {
void copy_bytes(const void* send, int64_t bytes, void* recv) {
  MOET_CHECK(bytes >= 0, "negative byte count ", bytes);
  if (bytes > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(bytes));
}
}  // namespace

void LocalCommunicator::allgather(const void* send, int64_t bytes, void* recv) {
  copy_bytes(send, bytes, recv);
}

void LocalCommunicator::alltoallv(const void* send, const int64_t* send_bytes,
                                  const int64_t* send_offsets, void* recv,
                                  const int64_t* recv_bytes, const int64_t* recv_offsets) {
  MOET_CHECK(send_bytes[0] == recv_bytes[0], "alltoallv: rank 0 sends ", send_bytes[0],
             " bytes to itself but expects to receive ", recv_bytes[0]);
  MOET_CHECK(send_offsets[0] >= 0 && recv_offsets[0] >= 0, "alltoallv: negative offset");
  copy_bytes(static_cast<const char*>(send) + send_offsets[0], send_bytes[0],
             static_cast<char*>(recv) + recv_offsets[0]);
}

void LocalCommunicator::alltoall(const void* send, int64_t bytes, void* recv) {
  copy_bytes(send, bytes, recv);
}

std::unique_ptr<Communicator> LocalCommunicator::split(int, int) {
  return std::make_unique<LocalCommunicator>();
}

void LocalCommunicator::abort(const std::string& why) {
  std::fprintf(stderr, "moet: rank 0: %s\n", why.c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

Communicator::Message LocalCommunicator::isend(const void*, int64_t, int peer, int) {
  MOET_FAIL("point-to-point send to rank ", peer, " in a one-process job");
}

Communicator::Message LocalCommunicator::irecv(void*, int64_t, int peer, int) {
  MOET_FAIL("point-to-point receive from rank ", peer, " in a one-process job");
}

void LocalCommunicator::wait(Message) { MOET_FAIL("no point-to-point message in flight"); }

}  // namespace moet
