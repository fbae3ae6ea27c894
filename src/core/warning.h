// One-line warnings on stderr ("moet: warning: ..."), printed once per job: under mpirun every
// rank runs the same checks on the same flags and data, so only the launcher's rank 0 prints.
#pragma once
#include <string_view>

namespace moet {

// This process's rank as the MPI launcher announces it in the environment (Open MPI, PMIx,
// MPICH, MVAPICH), readable before MPI is initialised; 0 outside mpirun.
int launcher_rank();

// Prints "moet: warning: <line>" on stderr on the launcher's rank 0 (every process outside
// mpirun); nothing on the other ranks.
void warn(std::string_view line);

// The cores this process may run on (sched_getaffinity; hardware_concurrency where that fails).
int usable_cores();

}  // namespace moet
