#include "train/expert_source_trees.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/tree_sum.h"

namespace moet {

ExpertSourceTrees::ExpertSourceTrees(std::vector<MoeLayer*> layers,
                                     std::vector<std::vector<MoeLayer*>> others) {
  if (layers.empty() || layers[0]->segments_per_expert() == 1) return;
  sources_ = layers[0]->segments_per_expert();
  const int64_t S = sources_;
  experts_.reserve(2 * layers.size());  // the layers keep views of the parts: no reallocation
  for (size_t l = 0; l < layers.size(); ++l) {
    MoeLayer* layer = layers[l];
    Tensor views[2];
    for (int i = 0; i < 2; ++i) {
      Weight* w = i == 0 ? layer->experts_gate_up() : layer->experts_down();
      const int64_t n = w->value.numel();
      Experts& x = experts_.emplace_back(Experts{w, std::vector<float>(size_t(S * n)), {}});
      x.trees.assign(size_t(S), GradientTree(n));
      views[i] = Tensor(x.parts.data(), DType::F32,
                        {S, w->value.size(0), w->value.size(1), w->value.size(2)});
    }
    layer->set_expert_grad_parts(views[0], views[1]);
    layers_.push_back(layer);
    for (const std::vector<MoeLayer*>& more : others) {
      MOET_ASSERT(more.size() == layers.size());
      more[l]->set_expert_grad_parts(views[0], views[1]);
      layers_.push_back(more[l]);
    }
  }
}

ExpertSourceTrees::~ExpertSourceTrees() {
  for (MoeLayer* layer : layers_) layer->set_expert_grad_parts({}, {});
}

void ExpertSourceTrees::zero() {
  for (Experts& x : experts_) std::fill(x.parts.begin(), x.parts.end(), 0.0f);
}

void ExpertSourceTrees::push() {
  for (Experts& x : experts_) {
    const int64_t n = x.weight->value.numel();
    for (int64_t s = 0; s < sources_; ++s) x.trees[size_t(s)].push(x.parts.data() + s * n);
  }
}

void ExpertSourceTrees::save_parts(std::vector<float>& to) const {
  to.clear();
  for (const Experts& x : experts_) to.insert(to.end(), x.parts.begin(), x.parts.end());
}

void ExpertSourceTrees::load_parts(const std::vector<float>& from) {
  size_t at = 0;
  for (Experts& x : experts_) {
    MOET_ASSERT(at + x.parts.size() <= from.size());
    std::copy(from.begin() + std::ptrdiff_t(at), from.begin() + std::ptrdiff_t(at + x.parts.size()),
              x.parts.begin());
    at += x.parts.size();
  }
  MOET_ASSERT(at == from.size());
}

void ExpertSourceTrees::finish() {
  for (Experts& x : experts_) {
    const int64_t n = x.weight->value.numel();
    for (int64_t s = 0; s < sources_; ++s) x.trees[size_t(s)].finish(x.parts.data() + s * n);
    tree_sum_arrays(x.parts.data(), sources_, n);
    // copied, not added: the weight's own gradient holds the zeros of the tree over sequences
    std::memcpy(x.weight->grad.f32(), x.parts.data(), size_t(n) * sizeof(float));
  }
}

}  // namespace moet
