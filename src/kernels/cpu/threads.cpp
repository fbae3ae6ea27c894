// threads.cpp — the thread count shared by the OpenMP loops and the BLAS libraries.
#include <cblas.h>
#include <omp.h>

#include "core/error.h"
#include "kernels/ops.h"

namespace moet::ops {

void set_num_threads(int n) {
  MOET_CHECK(n >= 1, "thread count must be >= 1, got ", n);
  omp_set_num_threads(n);  // our loops, and oneDNN (its OpenMP runtime reads the same ICV)
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace moet::ops
