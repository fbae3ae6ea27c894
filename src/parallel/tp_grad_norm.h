// The global gradient norm under tensor parallelism, bit for bit the one process's: a weight
// split over the tensor-parallel group holds one part of its Σ g² on each rank (under
// --deterministic the pairwise tree of its pieces, Weight::grad_square_sum), so those entries are
// added over the group — in the same pairwise tree over the ranks — before SquareSums::norm adds
// the weights in order. Replicated weights have the same entry on every rank already.
#pragma once
#include <cstddef>
#include <vector>

#include "model/params.h"
#include "optim/adamw.h"
#include "parallel/communicator.h"

namespace moet {

class TensorParallelGradNorm {
 public:
  TensorParallelGradNorm(Communicator& tp, const ParamStore& params);
  // `local` with the split weights' entries summed over the group (the same on every rank)
  const SquareSums& sums(const SquareSums& local);
  double operator()(const SquareSums& local) { return sums(local).norm(); }

 private:
  Communicator& tp_;
  std::vector<size_t> split_;  // the SquareSums entries of split weights
  std::vector<double> parts_;
  SquareSums global_;
};

}  // namespace moet
