// ZeRO-1 under mpirun: the reduce-scatter leaves exactly the allreduce's bits on each rank's
// range; the all-gather of ranges; sum_squares split at kSumSquaresChunk; and training with the
// optimizer state sharded gives bitwise the losses, gradient norms and parameters of training
// without it, at ep 1 and ep = world, with and without the communication thread, with fp32 and
// with bf16 moments (the precision-aware optimizer).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "data/dataset.h"
#include "kernels/ops.h"
#include "model/local_dispatcher.h"
#include "model/model.h"
#include "mpi_test_util.h"
#include "mpi_train_util.h"
#include "parallel/alltoall_dispatcher.h"
#include "parallel/data_parallel.h"
#include "parallel/zero1.h"
#include "train/train_step.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

std::unique_ptr<MpiCommunicator> world_copy() {
  auto c = test::world().split(0, test::world().rank());
  return std::unique_ptr<MpiCommunicator>(dynamic_cast<MpiCommunicator*>(c.release()));
}

std::vector<float> rank_input(int64_t n, int rank) {
  std::mt19937 gen(uint32_t(1234 + rank));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(gen) * float(1 << (gen() % 20));  // magnitudes make order matter
  return x;
}

void check_reduce_scatter(MpiCommunicator& comm, int64_t n, const std::vector<int64_t>& off) {
  const int r = comm.rank();
  std::vector<float> full = rank_input(n, r), part = full, mine = full;
  comm.allreduce_sum(full.data(), n);
  comm.reduce_scatter_sum_ranges(part.data(), off.data());
  for (int64_t i = 0; i < n; ++i) {
    const bool own = i >= off[r] && i < off[r + 1];
    const float want = own ? full[i] : mine[i];  // outside the range: unchanged
    ASSERT_EQ(std::memcmp(&part[i], &want, sizeof want), 0) << "n " << n << " i " << i;
  }
  // all-gather of the ranges gives every rank the allreduce's result
  comm.allgather_ranges(part.data(), off.data());
  // (n = 0: the vectors' data() may be null, which memcmp must not be given even for 0 bytes)
  ASSERT_TRUE(n == 0 || std::memcmp(part.data(), full.data(), size_t(n) * sizeof(float)) == 0)
      << "n " << n;
}

TEST(Zero1, ReduceScatterIsTheAllreduceBits) {
  auto comm = world_copy();
  const int P = comm->size();
  for (int64_t n : {0, 1, 3, 1000, 100003}) {
    check_reduce_scatter(*comm, n, even_offsets(n, P));
    // uneven ranges, some empty
    std::vector<int64_t> off(size_t(P) + 1, n);
    off[0] = 0;
    for (int p = 1; p < P; ++p) off[p] = n * p * p / (P * P);
    check_reduce_scatter(*comm, n, off);
  }
  comm->set_scratch_limit_bytes(1);  // one element per round
  check_reduce_scatter(*comm, 997, even_offsets(997, P));
  comm->set_scratch_limit_bytes(4 * 100 + 4);  // pieces that do not divide the ranges
  check_reduce_scatter(*comm, 12345, even_offsets(12345, P));
  // the even-split convenience reports its range
  std::vector<float> x = rank_input(101, comm->rank()), y = x;
  int64_t begin = -1, count = -1;
  comm->reduce_scatter_sum(x.data(), 101, &begin, &count);
  EXPECT_EQ(begin, 101 * comm->rank() / P);
  EXPECT_EQ(begin + count, 101 * (comm->rank() + 1) / P);
  comm->allreduce_sum(y.data(), 101);
  EXPECT_EQ(std::memcmp(x.data() + begin, y.data() + begin, size_t(count) * sizeof(float)), 0);
}

// Zero1 rebuilds the norm from sums of kSumSquaresChunk elements added in order from 0.
TEST(Zero1, SumSquaresIsChunkSumsInOrder) {
  const int64_t n = 3 * kSumSquaresChunk + 77;
  std::vector<float> x = rank_input(n, 0);
  const double whole = ops::sum_squares(Tensor(x.data(), DType::F32, {n}));
  double t = 0;
  for (int64_t b = 0; b < n; b += kSumSquaresChunk)
    t += ops::sum_squares(Tensor(x.data() + b, DType::F32, {std::min(kSumSquaresChunk, n - b)}));
  EXPECT_EQ(std::memcmp(&whole, &t, sizeof t), 0);
}

using test::TrainRun;

TrainRun train(int ep, bool zero1, bool overlap, int steps, MomentDtypes moments = {}) {
  test::TrainSetup o;
  o.moments = moments;
  o.ep = ep;
  o.zero1 = zero1;
  o.overlap = overlap;
  o.steps = steps;
  o.grad_clip = 0.5;  // clipping active on some steps
  TrainRun r = test::train_tiny(o);
  EXPECT_EQ(r.has_moments, !zero1);
  return r;
}

void expect_same(const TrainRun& a, const TrainRun& b, const std::string& what) {
  test::expect_same_training(a, b, what, true);
}

TEST(Zero1, TrainingIsBitwiseTheUnshardedTraining) {
  const int P = test::world().size();
  for (int ep : {1, P}) {
    TrainRun plain = train(ep, false, false, 10), z = train(ep, true, false, 10);
    expect_same(plain, z, "ep " + std::to_string(ep));
    EXPECT_LT(z.moment_bytes, plain.moment_bytes);
    if (test::world().rank() == 0)
      std::printf("[zero1] np %d ep %d: AdamW moments per rank %lld bytes without, %lld with\n", P,
                  ep, (long long)plain.moment_bytes, (long long)z.moment_bytes);
  }
}

// The precision-aware optimizer's bf16 moments, sharded: bitwise the unsharded bf16 training (the
// update is element-wise, each moment rounded where it is stored), half the moment bytes of fp32
// moments, and not the fp32 training (the rounding is there).
TEST(Zero1, Bf16MomentsAreBitwiseTheUnshardedTraining) {
  const int P = test::world().size();
  const MomentDtypes bf16{DType::BF16, DType::BF16};
  for (int ep : {1, P}) {
    TrainRun plain = train(ep, false, false, 8, bf16), z = train(ep, true, false, 8, bf16);
    expect_same(plain, z, "bf16 moments, ep " + std::to_string(ep));
    TrainRun z32 = train(ep, true, false, 8);
    EXPECT_EQ(2 * z.moment_bytes, z32.moment_bytes);
    EXPECT_EQ(2 * plain.moment_bytes, train(ep, false, false, 1).moment_bytes);
    EXPECT_NE(std::memcmp(z.params.data(), z32.params.data(), z.params.size() * sizeof(float)), 0);
    if (test::world().rank() == 0)
      std::printf("[zero1] np %d ep %d: bf16 moments per rank %lld bytes (fp32: %lld)\n", P, ep,
                  (long long)z.moment_bytes, (long long)z32.moment_bytes);
  }
  // one moment alone in bf16, with the communication thread
  const MomentDtypes v16{DType::F32, DType::BF16};
  expect_same(train(P, false, false, 6, v16), train(P, true, true, 6, v16), "bf16 v, overlap");
}

TEST(Zero1, OverlapGivesTheSameBits) {
  const int P = test::world().size();
  TrainRun plain = train(P, false, false, 6), z = train(P, true, true, 6);
  expect_same(plain, z, "overlap");
}

}  // namespace
}  // namespace moet
