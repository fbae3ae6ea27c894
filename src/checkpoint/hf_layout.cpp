#include "checkpoint/hf_layout.h"

#include <cctype>

namespace moet::hf {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads a non-negative decimal at s[pos..] (no sign, no leading '+'); advances pos. -1 if none.
int64_t read_index(const std::string& s, size_t& pos) {
  const size_t begin = pos;
  int64_t v = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) && pos - begin < 12)
    v = v * 10 + (s[pos++] - '0');
  return pos == begin ? -1 : v;
}

// The layer index of "model.layers.{l}.…", or -1; pos is left after the '.' that follows it.
int64_t layer_of(const std::string& name, size_t& pos) {
  static const std::string kLayers = "model.layers.";
  if (name.compare(0, kLayers.size(), kLayers) != 0) return -1;
  pos = kLayers.size();
  const int64_t l = read_index(name, pos);
  if (l < 0 || pos >= name.size() || name[pos] != '.') return -1;
  ++pos;
  return l;
}

}  // namespace

std::string mtp_prefix(const ModelConfig& c, int64_t k) {
  return "model.layers." + std::to_string(c.num_hidden_layers + k - 1) + ".";
}

std::string head_name(const ModelConfig& c) {
  return c.tie_word_embeddings ? kEmbedName : "lm_head.weight";
}

std::vector<SharedCopy> shared_copies(const ModelConfig& c, int64_t mtp_depths) {
  std::vector<SharedCopy> out;
  if (c.tie_word_embeddings) out.push_back({"lm_head.weight", kEmbedName});
  for (int64_t k = 1; k <= mtp_depths; ++k) {
    out.push_back({mtp_prefix(c, k) + "embed_tokens.weight", kEmbedName});
    out.push_back({mtp_prefix(c, k) + "shared_head.head.weight", head_name(c)});
  }
  return out;
}

int64_t mtp_depth_of(const std::string& name, const ModelConfig& c) {
  size_t pos = 0;
  const int64_t l = layer_of(name, pos);
  return l >= c.num_hidden_layers ? l - c.num_hidden_layers + 1 : 0;
}

bool is_routed_expert_name(const std::string& name, const ModelConfig& c) {
  size_t pos = 0;
  const int64_t l = layer_of(name, pos);
  if (l < 0) return false;
  const bool moe = l < c.num_hidden_layers ? c.is_moe_layer(l) : c.mtp_is_moe();
  static const std::string kExperts = "mlp.experts.";
  if (!moe || name.compare(pos, kExperts.size(), kExperts) != 0) return false;
  pos += kExperts.size();
  const int64_t e = read_index(name, pos);
  if (e < 0 || e >= c.n_routed_experts) return false;
  const std::string rest = name.substr(pos);
  return rest == ".gate_proj.weight" || rest == ".up_proj.weight" || rest == ".down_proj.weight";
}

bool kept_in_f32(const std::string& name) {
  return ends_with(name, ".mlp.gate.weight") ||
         ends_with(name, ".mlp.gate.e_score_correction_bias");
}

}  // namespace moet::hf
