#include "train/evaluation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/tokenizer.h"
#include "optim/expert_bias.h"

namespace moet {

std::vector<int64_t> token_byte_lengths(const Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<int64_t> bytes(size_t(vocab_size), 0);
  const int64_t known = std::min(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) bytes[id] = int64_t(tokenizer.decode(&id, 1).size());
  return bytes;
}

EvalResult evaluate_held_out(Model& model, const TokenDataset& ds, int64_t batches, EvalDump* dump,
                             const Tokenizer* tokenizer) {
  MOET_CHECK(ds.has_eval(), "the data (", ds.describe(), ") have no held-out part to evaluate");
  MOET_CHECK(batches > 0, "the number of evaluation batches must be positive, got ", batches);
  const int64_t B = model.micro_batch(), T = model.seq_len(), V = model.config().vocab_size;
  EvalResult r;
  r.batches = std::min(batches, ds.num_eval_batches(B, T));
  MOET_CHECK(r.batches > 0, "the held-out data (", ds.describe(), ") hold no batch of ", B,
             " sequences of ", T + 1, " tokens");
  std::vector<int32_t> tokens(B * (T + 1));
  std::vector<float> logits(dump ? B * T * V : 0);
  const std::vector<int64_t> token_bytes =
      tokenizer ? token_byte_lengths(*tokenizer, V) : std::vector<int64_t>{};
  double sum = 0;
  for (int64_t i = 0; i < r.batches; ++i) {
    ds.eval_batch(i, B, T, tokens.data());
    sum += model.forward(tokens.data()).lm_loss;
    if (tokenizer)  // the targets: every token of a row but its first
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 1; t <= T; ++t) r.bytes += token_bytes[tokens[b * (T + 1) + t]];
    if (!dump) continue;
    Tensor logits_NV(logits.data(), DType::F32, {B * T, V});
    model.logits(logits_NV);
    dump->logits.insert(dump->logits.end(), logits.begin(), logits.end());
    for (int64_t b = 0; b < B; ++b)
      dump->input_ids.insert(dump->input_ids.end(), tokens.begin() + b * (T + 1),
                             tokens.begin() + b * (T + 1) + T);
  }
  reset_router_stats(model.moe_layers());  // evaluation is no training step
  r.loss = sum / double(r.batches);
  r.perplexity = std::exp(r.loss);
  // Σ NLL over the targets (the loss is their mean) in bits, per byte of their text
  if (r.bytes > 0) r.bits_per_byte = sum * double(B * T) / std::log(2.0) / double(r.bytes);
  return r;
}

}  // namespace moet
