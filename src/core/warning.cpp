#include "core/warning.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace moet {

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

void warn(std::string_view line) {
  if (launcher_rank() != 0) return;
  std::fprintf(stderr, "moet: warning: %.*s\n", int(line.size()), line.data());
  std::fflush(stderr);
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

}  // namespace moet
