// Choosing the next token from a row of logits (docs/generate.md): greedy, or a draw from the
// softmax at a temperature restricted to the top-k and the top-p nucleus, seeded with the
// counter-based RNG so that a seed reproduces a generation.
#pragma once
#include <cstdint>
#include <vector>

namespace moet {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // keep the fewest most likely tokens whose mass reaches p, (0, 1]
  uint64_t seed = 0;
};

// The largest logit's index (the lowest index among equals).
int32_t argmax(const float* logits, int64_t V);

class Sampler {
 public:
  // Throws moet::Error for a negative temperature, a negative top_k or top_p outside (0, 1].
  explicit Sampler(const SamplingOptions& o);
  // The token of draw `step` (0, 1, ... within one generation) from logits[0, V): temperature 0
  // is argmax; else softmax(logits / temperature) over the top_k largest, cut to the top_p
  // nucleus (candidates in descending order, ties by lower index), renormalised, and one
  // uniform value of CounterRng(seed, stream "sample") at index `step` picks the token.
  int32_t sample(const float* logits, int64_t V, uint64_t step);
  // The probabilities the last sample() drew from, as (token, probability) in descending order
  // (empty after a greedy choice): for tests.
  const std::vector<std::pair<int32_t, double>>& last_distribution() const { return dist_; }

 private:
  SamplingOptions o_;
  std::vector<std::pair<int32_t, double>> dist_;
};

}  // namespace moet
