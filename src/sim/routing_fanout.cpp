#include "sim/routing_fanout.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace moet::sim {

Fanout routing_fanout(const ModelConfig& c, int64_t ep, int64_t rpd, int samples) {
  Fanout f;
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok;
  if (ep <= 1 || E == 0) return f;
  MOET_ASSERT(E % ep == 0 && rpd >= 1);
  const int64_t groups = std::max<int64_t>(1, c.n_group), per_group = E / groups;
  const int64_t keep = std::min(groups, std::max<int64_t>(1, c.topk_group));
  const int64_t per_rank = E / ep;
  uint64_t state = 0x9e3779b97f4a7c15ull;  // fixed seed: the same answer every run
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  std::vector<int64_t> group_ids(groups), candidates;
  std::vector<char> rank_hit(ep), domain_hit(ep / rpd + 1);
  double same = 0, other_ranks = 0, other_domains = 0;
  for (int s = 0; s < samples; ++s) {
    const int64_t src = static_cast<int64_t>(next(ep)), src_domain = src / rpd;
    std::iota(group_ids.begin(), group_ids.end(), 0);
    for (int64_t i = 0; i < keep; ++i) std::swap(group_ids[i], group_ids[i + next(groups - i)]);
    candidates.clear();
    for (int64_t i = 0; i < keep; ++i)
      for (int64_t e = 0; e < per_group; ++e) candidates.push_back(group_ids[i] * per_group + e);
    const int64_t n = static_cast<int64_t>(candidates.size()), k = std::min(K, n);
    std::fill(rank_hit.begin(), rank_hit.end(), 0);
    std::fill(domain_hit.begin(), domain_hit.end(), 0);
    for (int64_t i = 0; i < k; ++i) {
      std::swap(candidates[i], candidates[i + next(n - i)]);
      const int64_t r = candidates[i] / per_rank;
      if (r == src || rank_hit[r]) continue;
      rank_hit[r] = 1;
      if (r / rpd == src_domain) {
        same += 1;
      } else {
        other_ranks += 1;
        if (!domain_hit[r / rpd]) other_domains += 1;
        domain_hit[r / rpd] = 1;
      }
    }
  }
  f.ranks_same_domain = same / samples;
  f.ranks_other_domains = other_ranks / samples;
  f.other_domains = other_domains / samples;
  return f;
}

}  // namespace moet::sim
