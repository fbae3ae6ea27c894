// `moet bench`: measures this machine with moet's own kernels (GEMMs over a grid of shapes,
// causal attention, memory-bound ops, per-op overhead, copies) and describes it as the `local`
// system of the performance model.
#pragma once
#include <cstdio>

#include "sim/system_spec.h"

namespace moet {

// threads 0: all cores. Progress lines go to `log` (may be null).
sim::SystemSpec calibrate_local(int threads, std::FILE* log);

}  // namespace moet
