#include "model/inference.h"

#include "core/error.h"

namespace moet {

Decoder::Decoder(Model& model, int64_t capacity)
    : model_(model), cache_(model.config(), capacity) {}

Model& Decoder::lane(int64_t n) {
  if (n == model_.seq_len()) return model_;
  auto& m = lanes_[n];
  if (!m)
    m = std::make_unique<Model>(model_.config(),
                                ModelSpec{.micro_batch = 1, .seq_len = n, .shared = &model_});
  return *m;
}

void Decoder::forward(const int32_t* tokens, int64_t n, Tensor& logits_RV) {
  MOET_CHECK(n > 0, "nothing to run: no tokens");
  lane(n).forward_cached(tokens, cache_, logits_RV);
}

void check_generate_options(const ModelConfig& c, int64_t P, const GenerateOptions& o) {
  MOET_CHECK(P > 0, "the prompt has no tokens");
  MOET_CHECK(o.max_new_tokens > 0, "--max-new-tokens must be positive, got ", o.max_new_tokens);
  MOET_CHECK(P + o.max_new_tokens <= c.max_position_embeddings, "the prompt's ", P, " tokens + ",
             o.max_new_tokens, " new tokens exceed max_position_embeddings (",
             c.max_position_embeddings, ")");
  Sampler check(o.sampling);
}

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& c = model.config();
  const int64_t P = int64_t(prompt.size());
  check_generate_options(c, P, o);
  Sampler sampler(o.sampling);
  Decoder dec(model, P + o.max_new_tokens);
  std::vector<float> logits(size_t(c.vocab_size));
  Tensor logits_1V(logits.data(), DType::F32, {1, c.vocab_size});
  GenerateResult r;
  dec.prepare(P);  // the prefill lane's memory is set-up, not prefill time
  auto t0 = clock::now();
  dec.forward(prompt.data(), P, logits_1V);
  auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int32_t next = sampler.sample(logits.data(), c.vocab_size, uint64_t(i));
    r.tokens.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_id || i + 1 == o.max_new_tokens) break;
    dec.forward(&next, 1, logits_1V);
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace moet
