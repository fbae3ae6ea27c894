// GoogleTest main for tests run under mpirun: starts MPI through MpiCommunicator::world, runs
// every test on every rank, and exits non-zero on every rank when any rank failed. Rank 0
// prints GoogleTest's usual report; the other ranks print only their failures, tagged.
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>

#include "mpi_test_util.h"

namespace {

moet::MpiCommunicator* g_world = nullptr;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

moet::MpiCommunicator& moet::test::world() { return *g_world; }

int main(int argc, char** argv) {
  auto world = moet::MpiCommunicator::world(&argc, &argv);
  g_world = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  // An exception inside a test would leave the other ranks waiting in a collective: let it end
  // the job (std::terminate, and mpirun ends every rank) instead of being reported and skipped.
  GTEST_FLAG_SET(catch_exceptions, false);
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed && world->rank() == 0)
    std::fprintf(stderr, "mpi test: failures on at least one rank (see [rank R] lines)\n");
  return any_failed;
}
