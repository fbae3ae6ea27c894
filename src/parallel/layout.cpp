#include "parallel/layout.h"

#include "core/error.h"

namespace moet {

ParallelLayout make_parallel_layout(Communicator& world, int ep) {
  MOET_CHECK(ep >= 1, "--ep must be positive, got ", ep);
  MOET_CHECK(world.size() % ep == 0, "--ep ", ep, " does not divide the ", world.size(), " ranks");
  ParallelLayout l;
  l.world = &world;
  l.ep = ep;
  l.ep_group = world.split(world.rank() / ep, world.rank());
  l.edp_group = world.split(world.rank() % ep, world.rank());
  return l;
}

}  // namespace moet
