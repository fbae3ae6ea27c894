// Fault injection under mpirun (tests/mpi_fault.sh): rank 1 fails while rank 0 waits for it
// inside a collective; the whole job must end, non-zero, naming rank 1. Modes:
//   throw   rank 1 throws moet::Error; the handler calls abort() (MPI_Abort) with its message
//   unwind  rank 1 throws past the MPI world's owner; its destructor aborts the job
//   kill    rank 1 is killed by SIGKILL
//   exit    rank 1 exits with status 3 without finalising MPI
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace {

void step(moet::Communicator& comm, const std::string& mode) {
  std::vector<float> x(1 << 16, 1.0f);
  comm.allreduce_sum(x.data(), static_cast<int64_t>(x.size()));  // all ranks get this far
  if (comm.rank() == 1) {
    // Rank 0 is inside the next allreduce by now, waiting for this rank.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (mode == "throw") MOET_FAIL("injected failure on rank 1");
    if (mode == "unwind") throw std::runtime_error("injected failure on rank 1");
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "exit") std::_Exit(3);
  }
  comm.allreduce_sum(x.data(), static_cast<int64_t>(x.size()));
  std::fprintf(stderr, "rank %d: finished, which it should not have\n", comm.rank());
}

int run(int argc, char** argv) {
  auto world = moet::MpiCommunicator::world(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    step(*world, mode);
  } catch (const moet::Error& e) {
    world->abort(e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moet: %s\n", e.what());
    return 1;
  }
}
