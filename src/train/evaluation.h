// Held-out evaluation of a model outside a training run (`moet eval`): the mean next-token loss
// over a dataset's held-out batches, its perplexity, and optionally the logits.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "model/model.h"

namespace moet {

class Tokenizer;

struct EvalResult {
  int64_t batches = 0;    // held-out batches of model.micro_batch() sequences evaluated
  double loss = 0;        // mean next-token cross-entropy (main head), nats
  double perplexity = 0;  // exp(loss)
  // The standard error of `loss` over the batches' losses (NaN for one batch): how far another
  // draw of as many held-out batches would move it, the noise a recipe's effect must exceed.
  double loss_se = 0;
  // With a tokenizer: the UTF-8 bytes the evaluated target tokens decode to, and the loss per
  // byte in bits, Σ NLL / ln 2 / bytes — comparable across tokenizers (docs/huggingface.md).
  int64_t bytes = 0;
  double bits_per_byte = 0;
};

// The UTF-8 bytes each id in [0, vocab_size) decodes to on its own (tokenizer.decode of the one
// id): 1 for each byte of the byte tokenizer, 0 for its end-of-document token (it decodes to
// nothing), 0 for ids the tokenizer does not have (a model vocabulary padded past it).
std::vector<int64_t> token_byte_lengths(const Tokenizer& tokenizer, int64_t vocab_size);

// What the evaluated batches were: input ids [S, T] and the main head's logits [S, T, V] for the
// S = batches × micro-batch sequences, in order.
struct EvalDump {
  std::vector<int64_t> input_ids;
  std::vector<float> logits;
};

// Evaluates held-out batches 0 .. batches-1 (fewer when the held-out data have fewer), one
// micro-batch of the model at a time; fills `dump` when given. Throws moet::Error when the data
// have no held-out part.
// With a tokenizer, also the bytes and bits per byte of the targets.
// `progress` (optional) sees (batches done, batches, mean loss so far) after each batch.
EvalResult evaluate_held_out(Model& model, const TokenDataset& ds, int64_t batches,
                             EvalDump* dump = nullptr, const Tokenizer* tokenizer = nullptr,
                             const std::function<void(int64_t, int64_t, double)>& progress = {});

// The standard error of the mean of n values from their sum and sum of squares (NaN for n < 2).
double standard_error(double sum, double squares, int64_t n);

// A training run's held-out loss: its mean over the batches, the standard error, the batches.
struct HeldOutLoss {
  double loss = std::nan("");
  double se = std::nan("");
  int64_t batches = 0;
};

struct ParallelRun;
class Communicator;

// The held-out evaluation of a training run (`moet train`'s eval_loss): the mean LM loss over
// held-out batches of B sequences (run model.micro_batch() at a time, or through the pipeline);
// under data parallelism data-parallel rank r evaluates batches r, r + W, … and the means are
// averaged over ranks (every rank takes part in the experts' all-to-alls; under --pp only the
// last stage has a loss, the others add 0). NaN when the data have no held-out batch. buf: room
// for B sequences of T + 1 tokens.
HeldOutLoss evaluate_in_training(ParallelRun& par, int64_t B, const TokenDataset& ds,
                                 int64_t batches, std::vector<int32_t>& buf, Communicator* world);

}  // namespace moet
