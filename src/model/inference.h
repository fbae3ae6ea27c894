// Text generation over a Model's weights (docs/generate.md): the prompt runs in one prefill
// forward, then one token at a time, each over the KV cache of MLA latents (model/kv_cache.h);
// the next token is chosen by a Sampler. MTP modules play no part.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/sampling.h"

namespace moet {

// Incremental forwards over one KV cache. The model given holds the weights (a whole model,
// B = 1, default fp32 precision); forwards of n tokens run on a lane of the model planned for
// n tokens (made on first use, sharing the weights), so a prefill and the one-token steps each
// use the layers' own forward code at their size.
class Decoder {
 public:
  Decoder(Model& model, int64_t capacity);
  // Runs tokens[0, n) at the next n positions; logits_RV receives the logits of the last R
  // of them ([R, V], 1 <= R <= n).
  void forward(const int32_t* tokens, int64_t n, Tensor& logits_RV);
  // Makes the lane for forwards of n tokens now (planning its memory), e.g. before timing them.
  void prepare(int64_t n) { lane(n); }
  KvCache& cache() { return cache_; }
  const ModelConfig& config() const { return model_.config(); }

 private:
  Model& lane(int64_t n);
  Model& model_;
  std::map<int64_t, std::unique_ptr<Model>> lanes_;
  KvCache cache_;
};

struct GenerateOptions {
  int64_t max_new_tokens = 0;
  int32_t stop_id = -1;  // generation ends after this token (the tokenizer's end of document)
  SamplingOptions sampling;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens (the stop token included when it came)
  double prefill_seconds = 0, decode_seconds = 0;
};

// Throws moet::Error (one line) when a prompt of prompt_tokens cannot be generated from with o:
// no tokens, max_new_tokens not positive, beyond max_position_embeddings, bad sampling options.
void check_generate_options(const ModelConfig& c, int64_t prompt_tokens, const GenerateOptions& o);

// Generates up to max_new_tokens after the prompt (at least one token; prompt + max_new_tokens
// <= max_position_embeddings), calling on_token with each new token as soon as it is chosen.
GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace moet
