// The stages a decoder layer's forward and backward each run in, split where an MoE layer's
// expert exchanges are in flight, so that another micro-batch's (or lane's) stages can run while
// they travel: the two-lane overlap (--a2a-overlap, train/accumulation_lanes.cpp) and combined 1F1B
// (--pp with
// --a2a-overlap, PipelineExecutor) interleave them. This is the one list of them: adding a stage
// means adding it here and giving it a body in MoeLayer::forward_stage / backward_stage (and
// DecoderBlock's, if the block's own work moves). A dense layer does its FFN in one of them.
#pragma once
#include <array>

namespace moet {

enum class MoeStage {
  // forward: route, dispatch issued, shared expert (after attention, which comes first)
  // backward: the combine's backward issued, shared expert
  kSend,
  // forward: dispatch completed, the routed experts, combine issued
  // backward: the combine's backward completed, the routed experts, the dispatch's backward
  // issued, the router
  kExperts,
  // forward: combine completed, the residual added
  // backward: the dispatch's backward completed, then the norm's and attention's backward
  kReceive,
};

inline constexpr std::array<MoeStage, 3> kMoeStages = {MoeStage::kSend, MoeStage::kExperts,
                                                       MoeStage::kReceive};
inline constexpr MoeStage kFirstMoeStage = kMoeStages.front();
inline constexpr MoeStage kLastMoeStage = kMoeStages.back();

}  // namespace moet
