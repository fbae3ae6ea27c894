// Megatron's pipeline layout syntax (`--pp-layout`, Megatron's --pipeline-model-parallel-layout),
// one parser for the engine and the performance model: E the embedding, t a decoder layer, m an
// MTP layer, L the loss (final norm, head, cross-entropy), | the boundary between virtual stages
// (in order: rank 0 chunk 0, rank 1 chunk 0, …), *N repeats the item before it, (...) groups.
// DeepSeek-V3 on PP2 VPP8: "Et*4|(t*4|)*14tmL".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moet {

// The virtual stage of each slot — embedding, the `layers` decoder layers, the `mtp` MTP layers,
// the loss, in that order — from a layout. Throws moet::Error with one line naming the layout:
// a syntax error, an expansion past 2^20 characters, slots that are not E, layers × t, mtp × m,
// L in that order, or a stage count other than `virtual_stages`.
std::vector<size_t> parse_pipeline_layout(const std::string& layout, int64_t layers, int64_t mtp,
                                          int64_t virtual_stages);

// A layout that puts `layers` decoder layers on `virtual_stages` stages as evenly as they go (the
// spare layers on the middle stages first, then the first: the last holds the MTP layers and the
// loss), E on the first and the MTP layers and L on the last: "Ett|tmL" for 3 layers, 1 MTP, 2
// stages. Empty when no layout can give every middle stage a layer.
std::string balanced_pipeline_layout(int64_t layers, int64_t mtp, int64_t virtual_stages);

}  // namespace moet
