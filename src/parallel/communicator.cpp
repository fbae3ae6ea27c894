#include "parallel/communicator.h"

#include "core/error.h"

namespace moet {

void Communicator::reduce_scatter_sum(float* x, int64_t n, int64_t* begin, int64_t* count) {
  MOET_CHECK(n >= 0, "reduce_scatter_sum: negative length ", n);
  const std::vector<int64_t> off = even_offsets(n, size());
  reduce_scatter_sum_ranges(x, off.data());
  *begin = off[rank()];
  *count = off[rank() + 1] - off[rank()];
}

std::vector<int64_t> even_offsets(int64_t n, int p) {
  std::vector<int64_t> off(static_cast<size_t>(p) + 1);
  for (int r = 0; r <= p; ++r) off[r] = n * r / p;
  return off;
}

}  // namespace moet
