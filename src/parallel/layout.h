// ParallelLayout: how the world's ranks are grouped. Attention and dense layers are
// data-parallel over all ranks; routed experts are sharded over expert-parallel groups of `ep`
// consecutive ranks and replicated over the world/ep expert-data-parallel groups (Megatron's
// "parallel folding"; the groups are RankGrid::experts', parallel/rank_grid.h). Every group is
// a split of the world communicator.
#pragma once
#include <memory>

#include "parallel/communicator.h"

namespace moet {

struct ParallelLayout {
  Communicator* world = nullptr;
  std::unique_ptr<Communicator> ep_group;   // ranks [r0, r0 + ep): one shard of every expert each
  std::unique_ptr<Communicator> edp_group;  // ranks with the same position in their ep group
  int ep = 1;

  int rank() const { return world->rank(); }
  int size() const { return world->size(); }
  bool is_root() const { return world->rank() == 0; }
};

// Splits the world; ep must divide the world size (one clear error otherwise).
ParallelLayout make_parallel_layout(Communicator& world, int ep);

}  // namespace moet
