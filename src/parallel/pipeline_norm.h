// The global gradient norm under pipeline parallelism, bit for bit the one process's: each
// stage holds some of the model's weights; their Σ g² entries are gathered over the pipeline
// and put in the order one process declares the weights (embedding, decoder layers, LM head,
// final norm, MTP modules) before SquareSums::norm adds them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"
#include "optim/adamw.h"
#include "parallel/communicator.h"

namespace moet {

// Where a weight stands in one process's declaration order, by name (layers: the decoder
// layer count): 0 the embedding, 1 + i decoder layer i, then the LM head, the final norm and
// the MTP modules.
int64_t declaration_group(const std::string& weight_name, int64_t layers);

// The norm over the pipeline: each step, `local` holds this rank's entries, one per trainable
// weight of `params` in its order; the result is the same on every rank of `pp`. Where each
// weight goes is worked out once; a step allocates nothing.
class PipelineGradNorm {
 public:
  PipelineGradNorm(Communicator& pp, const ParamStore& params, int64_t layers);
  double operator()(const SquareSums& local);

 private:
  struct Entry {
    int64_t group = -1, pos = 0;
    double sq = 0;
    int64_t expert = 0;
  };
  Communicator& pp_;
  std::vector<Entry> mine_, all_;
  std::vector<int64_t> order_;  // all_ indices in one process's declaration order
  SquareSums global_;
};

}  // namespace moet
