// How far one token's top-k experts spread over the expert-parallel ranks: distinct ranks and
// distinct NVLink domains reached, under group-limited routing with balanced (uniform) choice.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace moet::sim {

struct Fanout {
  double ranks_same_domain = 0;    // distinct other ranks in the sender's domain, per token
  double ranks_other_domains = 0;  // distinct ranks in other domains, per token
  double other_domains = 0;        // distinct other domains, per token (hierarchical dispatch
                                   // sends each token once per domain, then forwards on NVLink)
};

// Experts are laid out in EP-rank order (rank r holds experts [r·E/ep, (r+1)·E/ep)); ranks
// [d·ranks_per_domain, (d+1)·ranks_per_domain) share domain d. Averaged over a fixed-seed sample
// of tokens that pick `topk_group` of `n_group` groups, then top-k experts within them.
Fanout routing_fanout(const ModelConfig& c, int64_t ep, int64_t ep_ranks_per_domain,
                      int samples = 4096);

}  // namespace moet::sim
