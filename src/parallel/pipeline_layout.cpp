#include "parallel/pipeline_layout.h"

#include <algorithm>

#include "core/error.h"

namespace moet {

namespace {

// Expands a Megatron pipeline layout ("Et*4|(t*4|)*14tmL") into its characters.
class LayoutParser {
 public:
  static constexpr size_t kMaxExpanded = size_t(1) << 20;
  explicit LayoutParser(const std::string& text) : t_(text) {}
  std::string expand() {
    std::string out = sequence();
    if (i_ != t_.size()) fail("unexpected '" + std::string(1, t_[i_]) + "'");
    return out;
  }

 private:
  std::string sequence() {
    std::string out;
    while (i_ < t_.size() && t_[i_] != ')') {
      std::string item;
      const char ch = t_[i_];
      if (ch == '(') {
        ++i_;
        item = sequence();
        if (i_ >= t_.size() || t_[i_] != ')') fail("missing ')'");
        ++i_;
      } else if (ch == 'E' || ch == 't' || ch == 'm' || ch == 'L' || ch == '|') {
        item = std::string(1, ch);
        ++i_;
      } else if (ch == ' ' || ch == ',') {
        ++i_;
        continue;
      } else {
        fail("unexpected '" + std::string(1, ch) + "' (use E, t, m, L, |, *N and parentheses)");
      }
      int64_t repeat = 1;
      if (i_ < t_.size() && t_[i_] == '*') {
        ++i_;
        size_t used = 0;
        try {
          repeat = std::stoll(t_.substr(i_), &used);
        } catch (const std::exception&) {
          fail("'*' must be followed by a count");
        }
        if (repeat < 1) fail("a repeat count must be at least 1");
        i_ += used;
      }
      if (repeat > int64_t(kMaxExpanded) ||
          out.size() + item.size() * size_t(repeat) > kMaxExpanded)
        fail("expands to more than " + std::to_string(kMaxExpanded) + " characters");
      for (int64_t r = 0; r < repeat; ++r) out += item;
    }
    return out;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(str("--pp-layout '", t_, "': ", why));
  }
  const std::string& t_;
  size_t i_ = 0;
};

}  // namespace

std::vector<size_t> parse_pipeline_layout(const std::string& layout, int64_t layers, int64_t mtp,
                                          int64_t virtual_stages) {
  const std::string x = LayoutParser(layout).expand();
  std::string want = "E";
  want.append(size_t(layers), 't').append(size_t(mtp), 'm').push_back('L');
  std::string kinds;
  std::vector<size_t> stage_of;
  size_t stage = 0;
  for (char ch : x) {
    if (ch == '|') {
      ++stage;
      continue;
    }
    kinds += ch;
    stage_of.push_back(stage);
  }
  const auto count = [&](char ch) { return int64_t(std::count(kinds.begin(), kinds.end(), ch)); };
  MOET_CHECK(kinds == want, "--pp-layout '", layout, "' has ", count('E'), " E, ", count('t'),
             " t, ", count('m'), " m, ", count('L'), " L; the model needs E, ", layers, " t, ", mtp,
             " m, L in that order");
  MOET_CHECK(int64_t(stage + 1) == virtual_stages, "--pp-layout '", layout, "' has ", stage + 1,
             " stages; PP×VPP = ", virtual_stages);
  return stage_of;
}

std::string balanced_pipeline_layout(int64_t layers, int64_t mtp, int64_t virtual_stages) {
  const int64_t S = virtual_stages;
  if (S < 1 || layers < 0 || mtp < 0 || layers < S - 2) return "";
  std::vector<int64_t> count(size_t(S), layers / S);
  int64_t spare = layers % S;
  for (int64_t k = 1; k + 1 < S && spare > 0; ++k, --spare) ++count[size_t(k)];
  if (spare > 0) ++count[0], --spare;
  if (spare > 0) ++count[size_t(S - 1)];
  // (layers >= S - 2: the middle stages have a layer each)
  auto repeat = [](char c, int64_t n) {
    return n > 3 ? std::string(1, c) + "*" + std::to_string(n) : std::string(size_t(n), c);
  };
  std::string out = "E";
  for (int64_t k = 0; k < S; ++k) {
    if (k > 0) out += '|';
    out += repeat('t', count[size_t(k)]);
  }
  return out + repeat('m', mtp) + "L";
}

}  // namespace moet
