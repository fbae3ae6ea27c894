// `moet checkpoint diff`: two checkpoints compared as the training state they hold, whatever
// layouts wrote them — the run's position (step, data cursor, AdamW's step count, ...), the model
// config and every global tensor, bit for bit. The oracle of every bitwise test.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moet {

class CheckpointReader;

struct CheckpointDiff {
  // One line per difference, naming what differs: "step: 3 vs 4",
  // "adam_m/model.norm.weight: 1 of 64 values differ (first at 17: 0.5 vs 0.25, max |a-b| 0.25)",
  // "param/x: only in DIR", "model config: field 'hidden_size' 64 vs 32".
  std::vector<std::string> differences;
  int64_t tensors_compared = 0;
  // Where the writers' layouts differ ("ranks 1 vs 2"): information, not a difference.
  std::vector<std::string> layout_notes;
  bool identical() const { return differences.empty(); }
};

CheckpointDiff diff_checkpoints(const CheckpointReader& a, const CheckpointReader& b);

}  // namespace moet
