// The Hugging Face tensor layout of a DeepSeek-V3 model beyond moet's own parameter names
// (shared by export_hf and load_hf_weights): which file names are copies of a tensor moet
// stores once, which belong to MTP modules, which are routed experts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace moet::hf {

inline constexpr char kEmbedName[] = "model.embed_tokens.weight";

// "model.layers.{num_hidden_layers + k - 1}." for MTP depth k >= 1.
std::string mtp_prefix(const ModelConfig& c, int64_t k);

// The name of the output projection moet uses (lm_head.weight, or the embedding when tied).
std::string head_name(const ModelConfig& c);

// A name in the hub layout that holds a copy of a tensor moet stores once: DeepSeek publishes
// each MTP module with its own embed_tokens and shared_head.head (equal to the main model's).
struct SharedCopy {
  std::string name;    // e.g. model.layers.61.embed_tokens.weight
  std::string source;  // the moet name it copies, e.g. model.embed_tokens.weight
};
// MTP depths 1..mtp_depths; with tied embeddings also lm_head.weight (a copy some writers keep).
std::vector<SharedCopy> shared_copies(const ModelConfig& c, int64_t mtp_depths);

// The MTP depth k >= 1 a name belongs to ("model.layers.{L + k - 1}.…"), or 0.
int64_t mtp_depth_of(const std::string& name, const ModelConfig& c);

// Whether `name` is a routed expert's weight of a MoE layer of `c` (main or MTP, any depth):
// model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight with e < n_routed_experts.
bool is_routed_expert_name(const std::string& name, const ModelConfig& c);

// Whether the router keeps this tensor in F32 in a bf16 checkpoint (transformers'
// `_keep_in_fp32_modules_strict`: mlp.gate.weight and mlp.gate.e_score_correction_bias).
bool kept_in_f32(const std::string& name);

}  // namespace moet::hf
