#include "parallel/pipeline_norm.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace moet {

int64_t declaration_group(const std::string& name, int64_t layers) {
  if (name == "model.embed_tokens.weight") return 0;
  if (name == "lm_head.weight") return layers + 1;
  if (name == "model.norm.weight") return layers + 2;
  const std::string p = "model.layers.";
  MOET_ASSERT(name.rfind(p, 0) == 0);
  const int64_t i = std::stoll(name.substr(p.size()));
  return i < layers ? 1 + i : layers + 3 + (i - layers);
}

PipelineGradNorm::PipelineGradNorm(Communicator& pp, const ParamStore& params, int64_t layers)
    : pp_(pp) {
  for (const Weight& w : params.weights())
    if (w.trainable)
      mine_.push_back({declaration_group(w.name, layers), int64_t(mine_.size()), 0.0, w.expert});
  const int P = pp.size();
  std::vector<int64_t> counts(static_cast<size_t>(P));
  const int64_t n = int64_t(mine_.size());
  pp.allgather(&n, sizeof n, counts.data());
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  mine_.resize(size_t(most));  // padding entries have group -1
  all_.resize(size_t(most) * size_t(P));
  pp.allgather(mine_.data(), most * int64_t(sizeof(Entry)), all_.data());
  for (size_t i = 0; i < all_.size(); ++i)
    if (all_[i].group >= 0) order_.push_back(int64_t(i));
  std::stable_sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) {
    const Entry &x = all_[size_t(a)], &y = all_[size_t(b)];
    return x.group != y.group ? x.group < y.group : x.pos < y.pos;
  });
  global_.sq.resize(order_.size());
  global_.expert.resize(order_.size());
}

double PipelineGradNorm::operator()(const SquareSums& local) {
  for (size_t i = 0; i < mine_.size() && mine_[i].group >= 0; ++i) mine_[i].sq = local.sq[i];
  pp_.allgather(mine_.data(), int64_t(mine_.size() * sizeof(Entry)), all_.data());
  for (size_t k = 0; k < order_.size(); ++k) {
    const Entry& e = all_[size_t(order_[k])];
    global_.sq[k] = e.sq;
    global_.expert[k] = char(e.expert);
  }
  return global_.norm();
}

}  // namespace moet
