#include "model/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace moet {

int32_t argmax(const float* logits, int64_t V) {
  MOET_ASSERT(V > 0);
  int64_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  return int32_t(best);
}

Sampler::Sampler(const SamplingOptions& o) : o_(o) {
  MOET_CHECK(o.temperature >= 0 && std::isfinite(o.temperature),
             "--temperature must be >= 0 (0: greedy), got ", o.temperature);
  MOET_CHECK(o.top_k >= 0, "--top-k must be >= 0 (0: all tokens), got ", o.top_k);
  MOET_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p must be in (0, 1], got ", o.top_p);
}

int32_t Sampler::sample(const float* logits, int64_t V, uint64_t step) {
  dist_.clear();
  if (o_.temperature == 0) return argmax(logits, V);
  // candidates in descending logit order, ties by lower index
  const int64_t k = o_.top_k > 0 ? std::min(o_.top_k, V) : V;
  dist_.resize(size_t(V));
  for (int64_t v = 0; v < V; ++v) dist_[v] = {int32_t(v), double(logits[v])};
  auto before = [](const std::pair<int32_t, double>& a, const std::pair<int32_t, double>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  std::partial_sort(dist_.begin(), dist_.begin() + k, dist_.end(), before);
  dist_.resize(size_t(k));
  // softmax at the temperature, in double
  const double top = dist_[0].second / o_.temperature;
  double sum = 0;
  for (auto& [id, p] : dist_) {
    p = std::exp(p / o_.temperature - top);
    sum += p;
  }
  // the nucleus: the fewest leading candidates whose mass reaches top_p
  size_t keep = dist_.size();
  if (o_.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < dist_.size(); ++i) {
      mass += dist_[i].second / sum;
      if (mass >= o_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  dist_.resize(keep);
  sum = 0;
  for (const auto& d : dist_) sum += d.second;
  for (auto& d : dist_) d.second /= sum;
  const double u = CounterRng(o_.seed, stream_id({0x73616d706c65ull /* "sample" */})).uniform(step);
  double acc = 0;
  for (const auto& [id, p] : dist_) {
    acc += p;
    if (u < acc) return id;
  }
  return dist_.back().first;  // u within rounding of 1
}

}  // namespace moet
