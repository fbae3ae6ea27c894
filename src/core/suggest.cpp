#include "core/suggest.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace moet {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: rows i-2, i-1 and i of the table.
  std::vector<size_t> two(b.size() + 1), one(b.size() + 1), row(b.size() + 1);
  std::iota(one.begin(), one.end(), size_t(0));
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({one[j] + 1, row[j - 1] + 1, one[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], two[j - 2] + 1);
    }
    std::swap(two, one);
    std::swap(one, row);
  }
  return one[b.size()];
}

std::string nearest_name(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  if (word.size() <= 2) return best;        // "-s": one letter is near every other one
  size_t best_d = 1 + word.size() / 3 + 1;  // one more than the farthest accepted
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best = c, best_d = d;
  }
  return best;
}

}  // namespace moet
