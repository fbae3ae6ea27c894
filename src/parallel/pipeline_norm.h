// The global gradient norm under pipeline parallelism, bit for bit the one process's: each
// stage holds some of the model's weights; their Σ g² entries are gathered over the pipeline
// and put in the order one process declares the weights (embedding, decoder layers, LM head,
// final norm, MTP modules) before SquareSums::norm adds them.
#pragma once
#include <cstdint>
#include <string>

#include "model/params.h"
#include "optim/adamw.h"
#include "parallel/communicator.h"

namespace moet {

// Where a weight stands in one process's declaration order, by name (layers: the decoder
// layer count): 0 the embedding, 1 + i decoder layer i, then the LM head, the final norm and
// the MTP modules.
int64_t declaration_group(const std::string& weight_name, int64_t layers);

// local: this rank's entries, one per trainable weight of `params` in its order. The same
// value on every rank of `pp`.
double pipeline_grad_norm(Communicator& pp, const ParamStore& params, const SquareSums& local,
                          int64_t layers);

}  // namespace moet
