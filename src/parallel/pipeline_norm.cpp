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

namespace {
struct Entry {
  int64_t group = -1, pos = 0;
  double sq = 0;
  int64_t expert = 0;
};
}  // namespace

double pipeline_grad_norm(Communicator& pp, const ParamStore& params, const SquareSums& local,
                          int64_t layers) {
  std::vector<Entry> mine;
  for (const Weight& w : params.weights()) {
    if (!w.trainable) continue;
    const size_t i = mine.size();
    MOET_ASSERT(i < local.sq.size());
    mine.push_back({declaration_group(w.name, layers), int64_t(i), local.sq[i], local.expert[i]});
  }
  MOET_ASSERT(mine.size() == local.sq.size());
  const int P = pp.size();
  std::vector<int64_t> counts(static_cast<size_t>(P));
  const int64_t n = int64_t(mine.size());
  pp.allgather(&n, sizeof n, counts.data());
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  mine.resize(size_t(most));  // padding entries have group -1
  std::vector<Entry> all(size_t(most) * size_t(P));
  pp.allgather(mine.data(), most * int64_t(sizeof(Entry)), all.data());
  all.erase(std::remove_if(all.begin(), all.end(), [](const Entry& e) { return e.group < 0; }),
            all.end());
  std::stable_sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) {
    return a.group != b.group ? a.group < b.group : a.pos < b.pos;
  });
  SquareSums global;
  for (const Entry& e : all) {
    global.sq.push_back(e.sq);
    global.expert.push_back(char(e.expert));
  }
  return global.norm();
}

}  // namespace moet
