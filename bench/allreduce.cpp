// Deterministic allreduce_sum (reduce-scatter + allgather in tree_sum order) vs MPI_Allreduce on
// the same buffer (both in place), alternating in one run (docs/parallel.md).
// usage: mpirun -np 2 build/bench_allreduce [floats, default 16M] [rounds, default 9]; rank 0
// prints the median time of each (slowest rank per round) and the ratio.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "parallel/mpi_communicator.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  auto world = moet::MpiCommunicator::world(&argc, &argv);
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{16} << 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  std::vector<float> x(static_cast<size_t>(n));
  std::vector<double> t_tree, t_mpi;
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up (scratch, page faults)
    for (int impl = 0; impl < 2; ++impl) {
      std::fill(x.begin(), x.end(), 1.0f + static_cast<float>(world->rank()));
      world->barrier();
      const double t0 = MPI_Wtime();
      if (impl == 0)
        world->allreduce_sum(x.data(), n);
      else
        MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                      world->handle());
      double dt = MPI_Wtime() - t0, slowest = 0;
      MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, world->handle());
      if (r > 0) (impl == 0 ? t_tree : t_mpi).push_back(slowest);
    }
  }
  if (world->rank() == 0) {
    const double a = median(t_tree), b = median(t_mpi), gb = n * 4.0 / 1e9;
    std::printf("allreduce of %lld floats on %d ranks, median of %d rounds\n",
                static_cast<long long>(n), world->size(), rounds);
    std::printf("  deterministic (tree order) %8.2f ms  %6.2f GB/s\n", a * 1e3, gb / a);
    std::printf("  MPI_Allreduce              %8.2f ms  %6.2f GB/s\n", b * 1e3, gb / b);
    std::printf("  ratio deterministic / MPI  %8.2f\n", a / b);
  }
  return 0;
}
