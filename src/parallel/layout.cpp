#include "parallel/layout.h"

#include "core/error.h"
#include "parallel/rank_grid.h"

namespace moet {

ParallelLayout make_parallel_layout(Communicator& world, int ep) {
  MOET_CHECK(ep >= 1, "--ep must be positive, got ", ep);
  MOET_CHECK(world.size() % ep == 0, "--ep ", ep, " does not divide the ", world.size(), " ranks");
  ParallelLayout l;
  l.world = &world;
  l.ep = ep;
  // the experts' grid over these ranks (one pipeline stage's): etp 1, ep, edp
  const RankGrid grid = RankGrid::experts(world.size(), 1, ep, 1);
  const int64_t r = world.rank();
  l.ep_group = world.split(int(grid.group_of(r, "ep")), int(grid.coordinate(r, "ep")));
  l.edp_group = world.split(int(grid.group_of(r, "edp")), int(grid.coordinate(r, "edp")));
  return l;
}

}  // namespace moet
