// Activation recomputation (Megatron's --recompute-granularity, --recompute-modules,
// --recompute-method, --recompute-num-layers; docs/training.md "Memory"): which activations of
// the decoder layers are not kept from forward to backward but computed again, from what is
// kept, just before the backward that reads them. The recomputed forward is the same arithmetic
// on the same inputs, so a run with recomputation trains bit for bit what one without trains.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"

namespace moet {

// The selective modules, with Megatron's names.
enum class RecomputeModule : uint8_t {
  kCoreAttn,       // attention's softmax product: its output and log-sum-exp
  kMlaUpProj,      // MLA's q and kv up-projections (q_b_proj, kv_b_proj) and the rope on q
  kMoeAct,         // the routed experts' SwiGLU output and their outputs
  kLayernorm,      // the input and post-attention RMSNorms' outputs
  kMlp,            // the dense MLP (first_k_dense_replace layers): all it keeps
  kMoe,            // the whole MoE layer: routing, the exchanges, the experts, the shared expert
  kSharedExperts,  // the shared expert: all it keeps
};
inline constexpr int kRecomputeModules = 7;
const std::vector<std::pair<std::string, RecomputeModule>>& recompute_module_choices();
const char* recompute_module_name(RecomputeModule m);

class RecomputeModules {
 public:
  bool has(RecomputeModule m) const { return bits_ & (1u << unsigned(m)); }
  void add(RecomputeModule m) { bits_ |= 1u << unsigned(m); }
  bool empty() const { return bits_ == 0; }
  bool operator==(const RecomputeModules& o) const { return bits_ == o.bits_; }
  std::vector<RecomputeModule> list() const;
  std::string names() const;  // "mla_up_proj moe_act layernorm" (Megatron's order)

 private:
  uint32_t bits_ = 0;
};

// The set the published DeepSeek-V3 recipes on GB200, B200 and H100 name (Megatron's
// --recompute-modules mla_up_proj moe_act layernorm).
RecomputeModules moe_recipe_recompute_modules();

enum class RecomputeGranularity { kNone, kSelective, kFull };
enum class RecomputeMethod { kUniform, kBlock };
const std::vector<std::pair<std::string, RecomputeGranularity>>& recompute_granularity_choices();
const std::vector<std::pair<std::string, RecomputeMethod>>& recompute_method_choices();
const char* recompute_granularity_name(RecomputeGranularity g);
const char* recompute_method_name(RecomputeMethod m);

struct RecomputePlan {
  RecomputeGranularity granularity = RecomputeGranularity::kNone;
  RecomputeModules modules;  // selective
  // full: uniform splits a model part's decoder layers into groups of num_layers, every group
  // keeping only its input; block recomputes the first num_layers layers of the part, each
  // keeping only its input (Megatron's methods; a part is a virtual pipeline stage).
  RecomputeMethod method = RecomputeMethod::kUniform;
  int64_t num_layers = 1;

  // full: the first layer of layer i's group among a part's n decoder layers; -1 when layer i
  // is kept whole.
  int64_t group_start(int64_t i, int64_t n) const;
  // "none", "selective (core_attn)", "full (uniform, 1 layer per group)".
  std::string describe() const;
};

// Where a layer's recomputed activations go when it plans (Workspace::kept): one region that
// every layer (selective) or group of layers (full) reuses, since they are made again just
// before their backward. Counts each module's bytes over all layers, for the header.
class RecomputeRegion {
 public:
  explicit RecomputeRegion(Arena& arena) : arena_(arena) {}
  Arena& arena() { return arena_; }
  // Starts a layer (or group): its recomputed activations begin at the region's start.
  void start_layer();
  // The arena for module m's next allocation (bytes allocated since the last call are
  // counted for the module of that call).
  Arena& for_module(RecomputeModule m);
  // Closes the count; the region's size is then the largest layer's (or group's).
  void finish();
  int64_t bytes(RecomputeModule m) const { return bytes_[int(m)]; }
  // Over all layers: what keeping them would take.
  int64_t total_bytes() const { return total_; }
  int64_t region_bytes() const { return region_; }

 private:
  void count_module();
  void close_layer();
  Arena& arena_;
  int current_ = -1;
  size_t mark_ = 0;
  int64_t bytes_[kRecomputeModules] = {};
  int64_t total_ = 0, region_ = 0;
};

}  // namespace moet
