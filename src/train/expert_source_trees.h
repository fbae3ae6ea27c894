// ExpertSourceTrees: --deterministic under expert parallelism (docs/parallel.md). In
// sequence-step s every rank p of an expert-parallel group runs its own sequence, number
// (group · ep + p) · B + s of the global batch, so one backward brings the owner of an expert
// the rows of ep different sequences. One process adds the gradients of all the sequences in
// the canonical tree over their numbers; for its group's block of ep · B sequences that tree is
// the tree over p of the trees over s (B a power of two). So the owner keeps each source's
// per-sequence expert gradient apart (MoeLayer::set_expert_grad_parts), adds source p's
// sequences in a GradientTree of their own, and adds the ep source sums in the tree over p at
// the end of the micro-batch; the expert-data-parallel reduction then adds the groups in the
// tree over groups (aligned blocks of ranks), which completes one process's tree.
#pragma once
#include <cstdint>
#include <vector>

#include "model/moe_layer.h"
#include "train/gradient_tree.h"

namespace moet {

class ExpertSourceTrees {
 public:
  // layers: the model's MoE layers. With one row segment per expert (no expert parallelism)
  // there is nothing to keep apart: it holds nothing and every call does nothing.
  // others[k]: more instances of the same layers, aligned with `layers` (a pipeline chunk's
  // other micro-batch slots): their expert gradients go to the same parts.
  explicit ExpertSourceTrees(std::vector<MoeLayer*> layers,
                             std::vector<std::vector<MoeLayer*>> others = {});
  ~ExpertSourceTrees();  // the layers' expert gradients go back to their weights
  ExpertSourceTrees(const ExpertSourceTrees&) = delete;
  ExpertSourceTrees& operator=(const ExpertSourceTrees&) = delete;

  // Before a sequence's backward: zeroes the per-source parts (the weights' own gradients are
  // left to ParamStore::zero_grads).
  void zero();
  // After it: each source's part becomes the next leaf of that source's tree.
  void push();
  // The per-source parts of the sequence in progress, saved to `to` (its size set) and loaded
  // back: a pipeline chunk runs other sequences' passes between one sequence's first and last.
  void save_parts(std::vector<float>& to) const;
  void load_parts(const std::vector<float>& from);
  // After the micro-batch's last sequence: each expert weight's gradient is overwritten with
  // the tree over sources of the sources' trees over sequences.
  void finish();

 private:
  struct Experts {  // one expert weight of one layer ([El, O, D]), its parts and trees
    Weight* weight;
    std::vector<float> parts;         // [S, El, O, D]: the current sequence, per source
    std::vector<GradientTree> trees;  // one per source
  };
  std::vector<MoeLayer*> layers_;  // every instance whose parts point here
  std::vector<Experts> experts_;   // gate/up, down for each layer
  int64_t sources_ = 1;
};

}  // namespace moet
