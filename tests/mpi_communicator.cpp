// MpiCommunicator under mpirun (np 2 and 4): allreduce_sum gives the bits of tree_sum() over the
// ranks' inputs on every rank, at any length and chunking; alltoallv / allgather / alltoall move
// bytes where asked, through MPI's collectives and through the oversized point-to-point path;
// split() groups reduce over their members in key order, and aligned pairs reproduce the world.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "mpi_test_util.h"

namespace moet {
namespace {

using test::world;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's element i: any rank can regenerate any rank's input. Magnitudes from 2^-12 to 2^27
// and ±1e8 make the sum depend on the order of the additions.
template <typename T>
T input(uint64_t seed, int rank, int64_t i) {
  const uint64_t h =
      mix(seed ^ mix(static_cast<uint64_t>(rank) * 0x100000001b3ull + static_cast<uint64_t>(i)));
  switch (h & 7) {
    case 0:
      return T(1e8);
    case 1:
      return T(-1e8);
    case 2:
      return T(1);
    default: {
      const T mant = T(1) + T((h >> 8) & 0xffffff) / T(16777216);
      const int e = static_cast<int>((h >> 32) % 40) - 12;
      return ((h >> 40) & 1 ? T(-1) : T(1)) * std::ldexp(mant, e);
    }
  }
}

// tree_sum over `members` (ranks in group order) of their inputs.
template <typename T>
std::vector<T> expected_sum(uint64_t seed, const std::vector<int>& members, int64_t n) {
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[i] = tree_sum<T>(0, static_cast<int>(members.size()),
                         [&](int j) { return input<T>(seed, members[j], i); });
  return out;
}

std::vector<int> all_ranks() {
  std::vector<int> r(static_cast<size_t>(world().size()));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

template <typename T>
std::vector<T> my_input(uint64_t seed, int64_t n) {
  std::vector<T> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = input<T>(seed, world().rank(), i);
  return x;
}

// Bitwise equality; reports the first difference.
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": got " << got[i] << ", want "
             << want[i] << " (rank " << world().rank() << ")";
  }
  return ::testing::AssertionSuccess();
}

uint64_t hash_bytes(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i)
    h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

// Every rank holds the same bytes.
template <typename T>
bool same_on_every_rank(const std::vector<T>& x) {
  const uint64_t h = hash_bytes(x.data(), x.size() * sizeof(T));
  std::vector<uint64_t> all(static_cast<size_t>(world().size()));
  world().allgather(&h, sizeof h, all.data());
  for (uint64_t v : all)
    if (v != h) return false;
  return true;
}

// A private copy of the world whose tuning a test may change.
std::unique_ptr<MpiCommunicator> world_copy() {
  auto c = world().split(0, world().rank());
  return std::unique_ptr<MpiCommunicator>(dynamic_cast<MpiCommunicator*>(c.release()));
}

TEST(MpiCommunicator, Basics) {
  EXPECT_TRUE(MpiCommunicator::launched_under_mpi());
  EXPECT_GE(world().size(), 2);
  EXPECT_GE(world().thread_level(), MPI_THREAD_SERIALIZED);
  EXPECT_EQ(world().world_rank(), world().rank());
  world().barrier();
}

template <typename T>
void check_allreduce(Communicator& comm, uint64_t seed, int64_t n) {
  std::vector<T> x = my_input<T>(seed, n);
  comm.allreduce_sum(x.data(), n);
  EXPECT_TRUE(same_bits(x, expected_sum<T>(seed, all_ranks(), n))) << "n = " << n;
  EXPECT_TRUE(same_on_every_rank(x)) << "n = " << n;
}

TEST(MpiCommunicator, AllreduceFloatIsTreeSum) { check_allreduce<float>(world(), 1, 10007); }
TEST(MpiCommunicator, AllreduceDoubleIsTreeSum) { check_allreduce<double>(world(), 2, 10007); }

// The inputs do make the order matter: adding from the last rank down differs from the tree.
// The inputs of any rank can be regenerated anywhere, so this checks at least 4 ranks' worth
// (2 ranks have a single order) whatever the world size.
TEST(MpiCommunicator, InputsAreOrderSensitive) {
  const int p = std::max(4, world().size());
  int differ = 0;
  for (int64_t i = 0; i < 10007; ++i) {
    float backwards = input<float>(1, p - 1, i);
    for (int r = p - 2; r >= 0; --r) backwards += input<float>(1, r, i);
    const float tree = tree_sum<float>(0, p, [&](int r) { return input<float>(1, r, i); });
    differ += std::memcmp(&backwards, &tree, sizeof tree) != 0;
  }
  EXPECT_GT(differ, 100);
}

TEST(MpiCommunicator, AllreduceShorterThanSize) {
  for (int64_t n : {0, 1, 2, 3}) {
    check_allreduce<float>(world(), 3, n);
    check_allreduce<double>(world(), 4, n);
  }
}

TEST(MpiCommunicator, AllreduceInManyChunks) {
  auto comm = world_copy();
  comm->set_scratch_limit_bytes(256 << 10);  // 64 Ki floats per chunk
  check_allreduce<float>(*comm, 5, (1 << 20) + 7);
  check_allreduce<double>(*comm, 6, (1 << 19) + 3);
  comm->set_scratch_limit_bytes(1);  // chunks of size() elements
  check_allreduce<float>(*comm, 7, 1001);
  comm->set_scratch_limit_bytes(4 * 1000 + 12);  // chunks that do not divide n
  check_allreduce<float>(*comm, 8, 12345);
}

// Rows that say where they come from.
struct Row {
  int32_t src, dst, k, check;
};
constexpr int32_t kSentinel = -7;

int64_t rows_from_to(int s, int d) { return (s * 7 + d * 3 + 1) % 4; }  // some are zero

void check_alltoallv(Communicator& comm) {
  const int p = comm.size(), me = comm.rank();
  const int64_t row = sizeof(Row);
  std::vector<int64_t> sb(p), so(p), rb(p), ro(p);
  // Send blocks in reverse destination order with a one-row gap after each.
  int64_t at = 0;
  for (int d = p - 1; d >= 0; --d) {
    so[d] = at * row;
    sb[d] = rows_from_to(me, d) * row;
    at += rows_from_to(me, d) + 1;
  }
  std::vector<Row> send(static_cast<size_t>(at), Row{kSentinel, kSentinel, kSentinel, 0});
  for (int d = 0; d < p; ++d)
    for (int64_t k = 0; k < rows_from_to(me, d); ++k)
      send[so[d] / row + k] = Row{me, d, static_cast<int32_t>(k), me * 1000 + d * 10 + int(k)};
  // Receive blocks in source order after a two-row gap.
  at = 2;
  for (int s = 0; s < p; ++s) {
    ro[s] = at * row;
    rb[s] = rows_from_to(s, me) * row;
    at += rows_from_to(s, me);
  }
  std::vector<Row> recv(static_cast<size_t>(at), Row{kSentinel, kSentinel, kSentinel, 0});
  comm.alltoallv(send.data(), sb.data(), so.data(), recv.data(), rb.data(), ro.data());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(recv[i].src, kSentinel) << "gap overwritten";
  for (int s = 0; s < p; ++s) {
    for (int64_t k = 0; k < rows_from_to(s, me); ++k) {
      const Row& r = recv[ro[s] / row + k];
      EXPECT_EQ(r.src, s);
      EXPECT_EQ(r.dst, me);
      EXPECT_EQ(r.k, k);
      EXPECT_EQ(r.check, s * 1000 + me * 10 + int(k));
    }
  }
}

void check_allgather(Communicator& comm) {
  const int p = comm.size();
  const int64_t bytes = 13;
  std::vector<unsigned char> send(bytes), recv(bytes * p, 0);
  for (int64_t i = 0; i < bytes; ++i) send[i] = static_cast<unsigned char>(comm.rank() * 31 + i);
  comm.allgather(send.data(), bytes, recv.data());
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < bytes; ++i)
      EXPECT_EQ(recv[r * bytes + i], static_cast<unsigned char>(r * 31 + i));
}

void check_alltoall(Communicator& comm) {
  const int p = comm.size(), me = comm.rank();
  const int64_t bytes = 11;
  std::vector<unsigned char> send(bytes * p), recv(bytes * p, 0);
  for (int d = 0; d < p; ++d)
    for (int64_t i = 0; i < bytes; ++i)
      send[d * bytes + i] = static_cast<unsigned char>(me * 50 + d * 7 + i);
  comm.alltoall(send.data(), bytes, recv.data());
  for (int s = 0; s < p; ++s)
    for (int64_t i = 0; i < bytes; ++i)
      EXPECT_EQ(recv[s * bytes + i], static_cast<unsigned char>(s * 50 + me * 7 + i));
}

TEST(MpiCommunicator, AlltoallvUnevenAndZeroCounts) { check_alltoallv(world()); }
TEST(MpiCommunicator, Allgather) { check_allgather(world()); }
TEST(MpiCommunicator, Alltoall) { check_alltoall(world()); }

// Counts beyond the largest MPI message go point-to-point in pieces (here 7 bytes: pieces cut
// through rows).
TEST(MpiCommunicator, OversizedExchangesGoInPieces) {
  auto comm = world_copy();
  for (int64_t max_bytes : {7, 16}) {
    comm->set_max_message_bytes(max_bytes);
    check_alltoallv(*comm);
    check_allgather(*comm);
    check_alltoall(*comm);
  }
}

TEST(MpiCommunicator, SplitEvenOdd) {
  const int me = world().rank();
  auto group = world().split(me % 2, me);
  std::vector<int> members;
  for (int r = me % 2; r < world().size(); r += 2) members.push_back(r);
  ASSERT_EQ(group->size(), static_cast<int>(members.size()));
  EXPECT_EQ(group->rank(), me / 2);
  const int64_t n = 3001;
  std::vector<float> x = my_input<float>(9, n);
  group->allreduce_sum(x.data(), n);
  EXPECT_TRUE(same_bits(x, expected_sum<float>(9, members, n)));
}

// Ranks are ordered by key: a descending key reverses the group and its reduction order.
TEST(MpiCommunicator, SplitOrdersByKey) {
  const int me = world().rank();
  auto group = world().split(0, -me);
  std::vector<int> members = all_ranks();
  std::reverse(members.begin(), members.end());
  EXPECT_EQ(group->rank(), world().size() - 1 - me);
  const int64_t n = 3001;
  std::vector<float> x = my_input<float>(10, n);
  group->allreduce_sum(x.data(), n);
  EXPECT_TRUE(same_bits(x, expected_sum<float>(10, members, n)));
}

// The invariance claim: a sum within aligned pairs, then across the pairs, has the bits of the
// world's sum (tree_sum over 4 = tree_sum over the 2 sums of aligned pairs).
TEST(MpiCommunicator, AlignedPairsReproduceTheWorld) {
  const int p = world().size(), me = world().rank();
  ASSERT_TRUE(p % 2 == 0 && (p & (p - 1)) == 0)
      << "register this test at a power-of-two rank count (it runs at 2 and 4)";
  auto pairs = world().split(me / 2, me);
  auto across = world().split(me % 2, me);
  const int64_t n = 20011;
  std::vector<float> x = my_input<float>(11, n);
  std::vector<float> y = x;
  pairs->allreduce_sum(x.data(), n);
  across->allreduce_sum(x.data(), n);
  world().allreduce_sum(y.data(), n);
  EXPECT_TRUE(same_bits(x, y));
  EXPECT_TRUE(same_bits(y, expected_sum<float>(11, all_ranks(), n)));
}

}  // namespace
}  // namespace moet
