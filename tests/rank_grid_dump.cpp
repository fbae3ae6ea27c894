// rank_grid_dump WORLD TP CP PP ETP EP: the attention and expert grids' groups for every token
// of one and two dimensions, as JSON ({"attention": {"tp": [[...]], ...}, "experts": {...}}), for
// tests/rank_grid_interop.py to compare with megatron-core's RankGenerator. A grid that does not
// factor: its one-line error on stderr, exit 1.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "parallel/rank_grid.h"

namespace {
nlohmann::json all_groups(const moet::RankGrid& g, const std::vector<std::string>& names) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < names.size(); ++i) {
    out[names[i]] = g.groups(names[i]);
    for (size_t j = i + 1; j < names.size(); ++j) {
      const std::string t = names[i] + "-" + names[j];
      out[t] = g.groups(t);
    }
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: rank_grid_dump WORLD TP CP PP ETP EP\n");
    return 2;
  }
  long long v[6];
  for (int i = 0; i < 6; ++i) v[i] = std::atoll(argv[i + 1]);
  try {
    const moet::RankGrid a = moet::RankGrid::attention(v[0], v[1], v[2], v[3]);
    const moet::RankGrid e = moet::RankGrid::experts(v[0], v[4], v[5], v[3]);
    nlohmann::json j;
    j["attention"] = all_groups(a, {"tp", "cp", "ep", "dp", "pp"});
    j["experts"] = all_groups(e, {"etp", "ep", "edp", "pp"});
    j["describe"] = {a.describe(), e.describe()};
    std::cout << j.dump() << "\n";
  } catch (const moet::Error& err) {
    std::fprintf(stderr, "%s\n", err.what());
    return 1;
  }
  return 0;
}
