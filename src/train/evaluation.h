// Held-out evaluation of a model outside a training run (`moet eval`): the mean next-token loss
// over a dataset's held-out batches, its perplexity, and optionally the logits.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "model/model.h"

namespace moet {

// The data a `--data` argument names, as `moet train` reads it: "" (the default English corpus),
// "mock" (random tokens), a text file or a directory of them. Throws moet::Error when the data
// need a larger vocabulary than vocab_size.
std::unique_ptr<TokenDataset> open_token_dataset(const std::string& spec, int64_t vocab_size,
                                                 uint64_t seed);

struct EvalResult {
  int64_t batches = 0;    // held-out batches of model.micro_batch() sequences evaluated
  double loss = 0;        // mean next-token cross-entropy (main head), nats
  double perplexity = 0;  // exp(loss)
};

// What the evaluated batches were: input ids [S, T] and the main head's logits [S, T, V] for the
// S = batches × micro-batch sequences, in order.
struct EvalDump {
  std::vector<int64_t> input_ids;
  std::vector<float> logits;
};

// Evaluates held-out batches 0 .. batches-1 (fewer when the held-out data have fewer), one
// micro-batch of the model at a time; fills `dump` when given. Throws moet::Error when the data
// have no held-out part.
EvalResult evaluate_held_out(Model& model, const TokenDataset& ds, int64_t batches,
                             EvalDump* dump = nullptr);

}  // namespace moet
