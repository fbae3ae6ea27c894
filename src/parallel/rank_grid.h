// RankGrid: how Megatron lays a parallel layout's dimensions over the world's ranks
// (megatron.core.parallel_state.RankGenerator), so that moet's groups are Megatron's.
//
// The world is a grid whose dimensions are listed fastest first: in "tp-cp-ep-dp-pp" a rank's
// tensor-parallel coordinate is rank % tp, its context-parallel one (rank / tp) % cp, and so on,
// pipeline outermost. Megatron's "parallel folding" lays two grids over the same ranks: the
// attention and dense layers' (tp-cp-ep-dp-pp, with ep = 1) and the MoE layers' (etp-ep-edp-pp,
// which Megatron's expert RankGenerator names tp-ep-dp-pp with cp = 1), so expert parallelism is
// not bounded by data parallelism (docs/parallel.md, "Rank grids").
//
// groups(token) gives what RankGenerator.get_ranks(token) gives: for a token naming some
// dimensions ("tp", "tp-pp", "dp-cp"), the groups of ranks that differ only in those
// dimensions — one group per combination of the other dimensions' coordinates, in the order
// of that combination's index (fastest dimension first), each group's ranks in the order of the
// named dimensions' index. tests/rank_grid_interop.py compares it with megatron-core's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moet {

class RankGrid {
 public:
  struct Dim {
    std::string name;  // "tp", "cp", "ep", "dp", "pp"; the experts' "etp", "ep", "edp", "pp"
    int64_t size = 1;
  };
  // dims fastest first; names unique, sizes positive (moet::Error otherwise).
  explicit RankGrid(std::vector<Dim> dims);

  // The attention and dense layers' grid over `world` ranks, Megatron's default order
  // tp-cp-ep-dp-pp with ep = 1: dp = world / (tp·cp·pp). One line saying what would factor
  // when it does not.
  static RankGrid attention(int64_t world, int64_t tp, int64_t cp, int64_t pp);
  // The MoE layers' grid: expert tensor parallelism etp, expert parallelism ep, expert data
  // parallelism edp = world / (etp·ep·pp), pipeline pp (Megatron: tp-ep-dp-pp, cp = 1).
  static RankGrid experts(int64_t world, int64_t etp, int64_t ep, int64_t pp);

  int64_t world() const;
  int64_t size(const std::string& name) const;  // 1 for a dimension the grid lacks
  // rank's coordinate along the named dimension (0 for one the grid lacks)
  int64_t coordinate(int64_t rank, const std::string& name) const;
  // Megatron's get_ranks(token): see above. token: names joined by '-', each in the grid.
  std::vector<std::vector<int64_t>> groups(const std::string& token) const;
  // Which of groups(token) holds rank: a split colour, the same on every rank of a group.
  int64_t group_of(int64_t rank, const std::string& token) const;
  // "tp2 cp1 ep1 dp2 pp2 (tp-cp-ep-dp-pp)": each dimension's size, fastest first.
  std::string describe() const;

 private:
  std::vector<Dim> dims_;
  std::vector<bool> mask(const std::string& token) const;  // per dim: named by the token
};

}  // namespace moet
