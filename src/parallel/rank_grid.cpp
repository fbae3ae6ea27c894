#include "parallel/rank_grid.h"

#include <sstream>

#include "core/error.h"

namespace moet {

RankGrid::RankGrid(std::vector<Dim> dims) : dims_(std::move(dims)) {
  MOET_CHECK(!dims_.empty(), "a rank grid needs at least one dimension");
  for (size_t i = 0; i < dims_.size(); ++i) {
    MOET_CHECK(dims_[i].size >= 1, "rank grid: ", dims_[i].name, " must be positive, got ",
               dims_[i].size);
    for (size_t j = 0; j < i; ++j)
      MOET_CHECK(dims_[i].name != dims_[j].name, "rank grid: ", dims_[i].name, " twice");
  }
}

namespace {
// world / product, the data-parallel size left, or one line naming the flags.
int64_t rest_of(int64_t world, int64_t product, const std::string& flags) {
  MOET_CHECK(product >= 1 && world % product == 0, flags, " need a multiple of ", product,
             " ranks, got ", world, ": run ", product, " x N ranks, or change ", flags);
  return world / product;
}
}  // namespace

RankGrid RankGrid::attention(int64_t world, int64_t tp, int64_t cp, int64_t pp) {
  MOET_CHECK(tp >= 1 && cp >= 1 && pp >= 1, "--tp, --cp and --pp must be positive");
  const int64_t dp = rest_of(
      world, tp * cp * pp,
      "--tp " + std::to_string(tp) + " --cp " + std::to_string(cp) + " --pp " + std::to_string(pp));
  return RankGrid({{"tp", tp}, {"cp", cp}, {"ep", 1}, {"dp", dp}, {"pp", pp}});
}

RankGrid RankGrid::experts(int64_t world, int64_t etp, int64_t ep, int64_t pp) {
  MOET_CHECK(etp >= 1 && ep >= 1 && pp >= 1, "--etp, --ep and --pp must be positive");
  const int64_t edp = rest_of(world, etp * ep * pp,
                              "--etp " + std::to_string(etp) + " --ep " + std::to_string(ep) +
                                  " --pp " + std::to_string(pp));
  return RankGrid({{"etp", etp}, {"ep", ep}, {"edp", edp}, {"pp", pp}});
}

int64_t RankGrid::world() const {
  int64_t n = 1;
  for (const Dim& d : dims_) n *= d.size;
  return n;
}

int64_t RankGrid::size(const std::string& name) const {
  for (const Dim& d : dims_)
    if (d.name == name) return d.size;
  return 1;
}

int64_t RankGrid::coordinate(int64_t rank, const std::string& name) const {
  MOET_ASSERT(rank >= 0 && rank < world());
  int64_t stride = 1;
  for (const Dim& d : dims_) {
    if (d.name == name) return (rank / stride) % d.size;
    stride *= d.size;
  }
  return 0;
}

std::vector<bool> RankGrid::mask(const std::string& token) const {
  std::vector<bool> m(dims_.size(), false);
  std::stringstream in(token);
  std::string name;
  while (std::getline(in, name, '-')) {
    bool found = false;
    for (size_t i = 0; i < dims_.size(); ++i)
      if (dims_[i].name == name) m[i] = found = true;
    MOET_CHECK(found, "rank grid ", describe(), " has no dimension '", name, "'");
  }
  return m;
}

std::vector<std::vector<int64_t>> RankGrid::groups(const std::string& token) const {
  const std::vector<bool> m = mask(token);
  int64_t in_group = 1, groups = 1;
  for (size_t i = 0; i < dims_.size(); ++i) (m[i] ? in_group : groups) *= dims_[i].size;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < in_group; ++k) {
      // g's digits fill the unnamed dimensions, k's the named ones, fastest first
      int64_t rank = 0, stride = 1, gi = g, ki = k;
      for (size_t i = 0; i < dims_.size(); ++i) {
        int64_t& index = m[i] ? ki : gi;
        rank += (index % dims_[i].size) * stride;
        index /= dims_[i].size;
        stride *= dims_[i].size;
      }
      out[size_t(g)].push_back(rank);
    }
  return out;
}

int64_t RankGrid::group_of(int64_t rank, const std::string& token) const {
  const std::vector<bool> m = mask(token);
  int64_t g = 0, stride = 1;
  for (size_t i = 0; i < dims_.size(); ++i)
    if (!m[i]) {
      g += coordinate(rank, dims_[i].name) * stride;
      stride *= dims_[i].size;
    }
  return g;
}

std::string RankGrid::describe() const {
  std::string sizes, order;
  for (const Dim& d : dims_) {
    sizes += (sizes.empty() ? "" : " ") + d.name + std::to_string(d.size);
    order += (order.empty() ? "" : "-") + d.name;
  }
  return sizes + " (" + order + ")";
}

}  // namespace moet
