#include "train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "data/tokenizer.h"
#include "optim/expert_bias.h"
#include "parallel/communicator.h"
#include "train/parallelize.h"

namespace moet {

std::vector<int64_t> token_byte_lengths(const Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<int64_t> bytes(size_t(vocab_size), 0);
  const int64_t known = std::min(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) bytes[id] = int64_t(tokenizer.decode(&id, 1).size());
  return bytes;
}

namespace {

// The sums over batches of their mean losses and of the squares (for the standard error).
struct LossSums {
  double sum = 0, squares = 0;
};

// The loop both evaluations run: held-out batches first, first + stride, … (count of them) of B
// sequences of T + 1 tokens read into buf, each batch's mean LM loss from `loss`; `after` sees
// each batch once its loss is taken (with the batches done so far).
LossSums held_out_loss_sums(const TokenDataset& ds, int64_t count, int64_t first, int64_t stride,
                            int64_t B, int64_t T, int32_t* buf,
                            const std::function<double(const int32_t*)>& loss,
                            const std::function<void(const int32_t*, int64_t)>& after = {}) {
  LossSums s;
  for (int64_t i = 0; i < count; ++i) {
    ds.eval_batch(i * stride + first, B, T, buf);
    const double l = loss(buf);
    s.sum += l;
    s.squares += l * l;
    if (after) after(buf, i + 1);
  }
  return s;
}

}  // namespace

double standard_error(double sum, double squares, int64_t n) {
  if (n < 2) return std::nan("");
  const double mean = sum / double(n);
  const double var = std::max(0.0, (squares - double(n) * mean * mean) / double(n - 1));
  return std::sqrt(var / double(n));
}

namespace {}  // namespace

EvalResult evaluate_held_out(Model& model, const TokenDataset& ds, int64_t batches, EvalDump* dump,
                             const Tokenizer* tokenizer,
                             const std::function<void(int64_t, int64_t, double)>& progress) {
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
  double running = 0;
  const LossSums sums = held_out_loss_sums(
      ds, r.batches, 0, 1, B, T, tokens.data(),
      [&](const int32_t* batch) {
        const double l = model.forward(batch).lm_loss;
        running += l;
        return l;
      },
      [&](const int32_t* batch, int64_t done) {
        if (progress) progress(done, r.batches, running / double(done));
        if (tokenizer)  // the targets: every token of a row but its first
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 1; t <= T; ++t) r.bytes += token_bytes[batch[b * (T + 1) + t]];
        if (!dump) return;
        Tensor logits_NV(logits.data(), DType::F32, {B * T, V});
        model.logits(logits_NV);
        dump->logits.insert(dump->logits.end(), logits.begin(), logits.end());
        for (int64_t b = 0; b < B; ++b)
          dump->input_ids.insert(dump->input_ids.end(), batch + b * (T + 1),
                                 batch + b * (T + 1) + T);
      });
  reset_router_stats(model.moe_layers());  // evaluation is no training step
  const double sum = sums.sum;
  r.loss = sum / double(r.batches);
  r.loss_se = standard_error(sums.sum, sums.squares, r.batches);
  r.perplexity = std::exp(r.loss);
  // Σ NLL over the targets (the loss is their mean) in bits, per byte of their text
  if (r.bytes > 0) r.bits_per_byte = sum * double(B * T) / std::log(2.0) / double(r.bytes);
  return r;
}

HeldOutLoss evaluate_in_training(ParallelRun& par, int64_t B, const TokenDataset& ds,
                                 int64_t batches, std::vector<int32_t>& buf, Communicator* world) {
  Model& model = par.model();
  const int64_t T = model.seq_len(), chunk = model.micro_batch(), chunks = B / chunk;
  const int64_t W = par.dp, r = par.dp_rank;
  batches = std::min(batches, ds.num_eval_batches(B, T) / W);
  if (!ds.has_eval() || batches <= 0) return {};
  const std::function<const int32_t*(int64_t)> part = [&](int64_t c) {
    return buf.data() + c * chunk * (T + 1);
  };
  const LossSums sums =
      held_out_loss_sums(ds, batches, r, W, B, T, buf.data(), [&](const int32_t*) {
        double batch = 0;
        if (par.pipeline)
          batch = par.pipeline->forward_only(part, chunks);
        else
          for (int64_t c = 0; c < chunks; ++c) batch += model.forward(part(c)).lm_loss;
        return batch / double(chunks);
      });
  reset_router_stats(par.moe_layers());
  for (const auto& [from, into] : par.moe_merges()) reset_router_stats({from});
  // the mean of the ranks' means (each rank evaluates as many batches), and the standard error
  // over all W x batches batch losses
  double s[2] = {sums.sum / double(batches), sums.squares};
  if (par.tp_rank != 0) s[0] = s[1] = 0;  // a tensor-parallel group's parts share one loss
  if (world) world->allreduce_sum(s, 2);
  HeldOutLoss h;
  h.loss = s[0] / double(W);
  h.batches = batches * W;
  h.se = standard_error(h.loss * double(h.batches), s[1], h.batches);
  return h;
}

}  // namespace moet
