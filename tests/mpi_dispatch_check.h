// Shared by the MPI dispatcher tests: dispatch then combine through identity experts is the
// identity, for either expert-exchange dispatcher.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "mpi_test_util.h"
#include "mpi_train_util.h"

namespace moet::test {

// dispatch → identity experts → combine with unit gates gives K·x; backward gives K·dy. Rows
// carry their source rank and token (x = rank·1000 + token + column/4). idx_all: every rank's
// [N, K] routing, in rank order.
inline void check_dispatch_identity(DispatcherKind kind, const std::vector<int32_t>& idx_all,
                                    int64_t E, int64_t N, int64_t K) {
  Communicator& world = test::world();
  const int64_t D = 3, r = world.rank(), P = world.size();
  Arena act(4 << 20), scratch(4 << 20);
  Workspace ws{act, scratch, 1, N};
  std::unique_ptr<ExpertExchangeDispatcher> dp;
  if (kind == DispatcherKind::kAllGather)
    dp = std::make_unique<AllGatherDispatcher>(world, E);
  else
    dp = std::make_unique<AllToAllDispatcher>(world, E);
  ExpertExchangeDispatcher& d = *dp;
  d.plan(ws, D, K);
  ASSERT_EQ(d.segments_per_expert(), P);
  ASSERT_EQ(d.num_local_experts(), E / P);
  ASSERT_EQ(d.first_local_expert(), r * (E / P));
  Tensor x = act.alloc_f32({N, D}), idx = act.alloc_i32({N, K}), gates = act.alloc_f32({N, K});
  Tensor y = act.alloc_f32({N, D}), dx = act.alloc_f32({N, D}), dg = act.alloc_f32({N, K});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j) x.f32()[n * D + j] = float(r * 1000 + n + 0.25 * j);
  for (int64_t i = 0; i < N * K; ++i) idx.i32()[i] = idx_all[r * N * K + i];
  ops::fill(gates, 1.0);
  d.dispatch(x, idx);
  if (kind == DispatcherKind::kAllGather) {
    // The gather moves this rank's N rows and routing to each peer, nothing else.
    EXPECT_EQ(d.bytes_sent(), (P - 1) * N * (D * int64_t(sizeof(float)) + K * 4));
    EXPECT_EQ(d.routing_bytes_sent(), (P - 1) * N * K * int64_t(sizeof(int32_t)));
  }
  Tensor xp = d.expert_rows(), off = d.expert_offsets();
  ASSERT_EQ(off.numel(), d.num_local_experts() * P + 1);
  ASSERT_EQ(off.i32()[0], 0);
  ASSERT_EQ(off.i32()[off.numel() - 1], xp.size(0));
  // Segment (local expert l, source rank p): the rows of p routed to l, in token then k order.
  const int64_t L = d.num_local_experts();
  for (int64_t l = 0; l < L; ++l)
    for (int64_t p = 0; p < P; ++p) {
      std::vector<float> want;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          if (idx_all[(p * N + n) * K + k] == d.first_local_expert() + l)
            want.push_back(float(p * 1000 + n));
      const int32_t b = off.i32()[l * P + p], e = off.i32()[l * P + p + 1];
      ASSERT_EQ(e - b, int64_t(want.size())) << "segment (" << l << ", " << p << ")";
      for (int32_t m = b; m < e; ++m)
        for (int64_t j = 0; j < D; ++j)
          EXPECT_EQ(xp.f32()[m * D + j], want[m - b] + float(0.25 * j))
              << "segment (" << l << ", " << p << ") row " << m - b;
    }
  Tensor yp = xp;  // identity experts
  d.combine(yp, gates, y, false);
  for (int64_t i = 0; i < N * D; ++i) ASSERT_EQ(y.f32()[i], float(K) * x.f32()[i]);
  Tensor dyp = scratch.alloc_f32({d.max_expert_rows(), D}).rows(0, xp.size(0));
  d.combine_backward(x, yp, gates, dyp, dg);
  // dyp = gates · dy at the experts: the expert rows themselves.
  EXPECT_EQ(std::memcmp(dyp.ptr, xp.ptr, xp.bytes()), 0);
  ops::fill(dx, 0.0);
  d.dispatch_backward(dyp, dx);
  for (int64_t i = 0; i < N * D; ++i) ASSERT_EQ(dx.f32()[i], float(K) * x.f32()[i]);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double dot = 0;
      for (int64_t j = 0; j < D; ++j) dot += double(x.f32()[n * D + j]) * x.f32()[n * D + j];
      EXPECT_NEAR(dg.f32()[n * K + k], dot, 1e-3 * dot);
    }
}

// Routings: spread unevenly over every expert; all on rank 0's first experts; all on the last
// expert; each rank to the next rank's experts; one expert per rank.
inline void check_dispatch_identity_cases(DispatcherKind kind) {
  const int64_t P = test::world().size(), E = 4 * P, N = 7, K = 3;
  std::vector<int32_t> idx(P * N * K);
  // spread over every expert, uneven
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7 + i / 5) % E);
  check_dispatch_identity(kind, idx, E, N, K);
  // skewed: every assignment to experts 0..K-1 (all on rank 0); other experts empty
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(i % K);
  check_dispatch_identity(kind, idx, E, N, K);
  // skewed to the last rank's last expert, repeated within a token
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t(E - 1);
  check_dispatch_identity(kind, idx, E, N, K);
  // rank p routes only to rank (p + 1) % P's experts, token-dependent; odd experts empty
  for (int64_t p = 0; p < P; ++p)
    for (int64_t a = 0; a < N * K; ++a)
      idx[p * N * K + a] = int32_t(((p + 1) % P) * 4 + 2 * ((a / K + a % K) % 2));
  check_dispatch_identity(kind, idx, E, N, K);
  // one expert per rank
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i / 3 + i % 2) % P);
  check_dispatch_identity(kind, idx, P, N, K);
}

}  // namespace moet::test
