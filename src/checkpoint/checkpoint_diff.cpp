#include "checkpoint/checkpoint_diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "core/error.h"

namespace moet {

namespace {

// The first top-level field of two JSON objects that differs, as "field 'k' A vs B".
std::string first_field_difference(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.push_back(k);
  for (const auto& [k, v] : b.items())
    if (!a.contains(k)) keys.push_back(k);
  for (const std::string& k : keys) {
    const std::string x = a.contains(k) ? a[k].dump() : "(absent)";
    const std::string y = b.contains(k) ? b[k].dump() : "(absent)";
    if (x != y) return str("field '", k, "' ", x, " vs ", y);
  }
  return "";
}

}  // namespace

CheckpointDiff diff_checkpoints(const CheckpointReader& ra, const CheckpointReader& rb) {
  CheckpointDiff d;
  const CheckpointIndex &a = ra.index(), &b = rb.index();
  auto position = [&](const char* what, auto x, auto y) {
    if (x != y) d.differences.push_back(str(what, ": ", x, " vs ", y));
  };
  position("step", a.step, b.step);
  position("consumed samples", a.consumed_samples, b.consumed_samples);
  position("tokens", a.tokens, b.tokens);
  position("seed", a.seed, b.seed);
  position("data cursor", a.data_cursor, b.data_cursor);
  position("global batch", a.global_batch, b.global_batch);
  position("adam steps", a.adam_steps, b.adam_steps);
  if (a.model_config != b.model_config)
    d.differences.push_back("model config: " +
                            first_field_difference(a.model_config, b.model_config));

  for (const char* k :
       {"ranks", "ep", "pp", "zero1", "deterministic", "micro_batch", "grad_accum", "precision"}) {
    const std::string x = a.run.contains(k) ? a.run[k].dump() : "-";
    const std::string y = b.run.contains(k) ? b.run[k].dump() : "-";
    if (x != y) d.layout_notes.push_back(str(k, " ", x, " vs ", y));
  }

  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end()) {
      d.differences.push_back(name + ": only in " + ra.dir());
      continue;
    }
    if (it->second.shape != t.shape) {
      d.differences.push_back(str(name, ": shapes differ, ", shape_text(t.shape), " vs ",
                                  shape_text(it->second.shape)));
      continue;
    }
    const std::vector<float> x = ra.read_tensor(name), y = rb.read_tensor(name);
    ++d.tensors_compared;
    int64_t n = 0, first = -1;
    double max_abs = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
        if (n++ == 0) first = int64_t(i);
        max_abs = std::max(max_abs, double(std::fabs(x[i] - y[i])));
      }
    if (n > 0)
      d.differences.push_back(str(name, ": ", n, " of ", x.size(), " values differ (first at ",
                                  first, ": ", x[size_t(first)], " vs ", y[size_t(first)],
                                  ", max |a-b| ", max_abs, ")"));
  }
  for (const auto& [name, t] : b.tensors)
    if (!a.tensors.count(name)) d.differences.push_back(name + ": only in " + rb.dir());
  return d;
}

}  // namespace moet
