// Point-to-point bandwidth between MPI ranks 0 and 1: rank 0 streams `count` messages of `bytes`
// each to rank 1, which answers with one empty message when all have arrived; the time from the
// first send to the answer, median over `rounds` (after one warm-up round), gives the rate in one
// direction. Used to measure shared memory between ranks of one node and the shaped links of
// scripts/cluster.sh (docs/cluster.md). Other ranks only wait at the barriers.
// usage: mpirun -np 2 build/bench_p2p_bandwidth [bytes, default 4 MiB] [count, default 64]
//        [rounds, default 5]
// Rank 0 prints one line: `p2p_bandwidth bytes=B count=C rounds=R median_s=T GB/s=X Gbit/s=Y`.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long bytes = argc > 1 ? std::atoll(argv[1]) : 4LL << 20;
  const int count = argc > 2 ? std::atoi(argv[2]) : 64;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (size < 2 || bytes <= 0 || bytes > (1LL << 30) || count <= 0 || rounds <= 0) {
    if (rank == 0)
      std::fprintf(stderr, "usage: mpirun -np 2 bench_p2p_bandwidth [bytes] [count] [rounds]\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<char> buf(static_cast<size_t>(bytes), 1);
  std::vector<double> times;
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up (connections, page faults)
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (rank == 0) {
      for (int i = 0; i < count; ++i)
        MPI_Send(buf.data(), static_cast<int>(bytes), MPI_CHAR, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(nullptr, 0, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      for (int i = 0; i < count; ++i)
        MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_CHAR, 0, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      MPI_Send(nullptr, 0, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
    if (r > 0 && rank == 0) times.push_back(MPI_Wtime() - t0);
  }
  if (rank == 0) {
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const double total = static_cast<double>(bytes) * count;
    std::printf("p2p_bandwidth bytes=%lld count=%d rounds=%d median_s=%.6f GB/s=%.3f Gbit/s=%.3f\n",
                bytes, count, rounds, t, total / t / 1e9, total * 8 / t / 1e9);
  }
  MPI_Finalize();
  return 0;
}
