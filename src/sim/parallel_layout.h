// SimLayout: a parallel layout of one training run for the performance model (TP, PP, VPP, EP,
// micro-batch, global batch, precision, recompute), and the checks that it fits the model and
// the cluster (one line naming what does not divide).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recipe.h"
#include "model/recompute.h"
#include "parallel/pipeline_schedule.h"

namespace moet::sim {

struct SimLayout {
  int64_t gpus = 1;
  int64_t tp = 1, pp = 1, vpp = 1, ep = 1, etp = 1;
  // Context parallelism: each sequence split over cp ranks in 2·cp load-balanced chunks (rank i
  // holds chunks i and 2·cp−1−i), MLA's compressed KV latent all-gathered over them.
  int64_t cp = 1;
  int64_t mbs = 1;  // sequences per micro-batch
  int64_t gbs = 1;  // sequences per optimizer step
  int64_t seq = 4096;
  Recipe precision = Recipe::BF16;  // the training recipe (model/recipe.h)
  int64_t mtp = -1;                 // MTP depth; -1: the model config's num_nextn_predict_layers
  std::string recompute = "none";   // none | selective | full
  // selective: the modules recomputed, as moet train's --recompute-modules (empty: core_attn,
  // Megatron's default)
  RecomputeModules recompute_modules;
  RecomputeModules selective_modules() const;
  bool a2a_overlap = true;  // hide dispatch/combine behind the other half micro-batch's compute
  bool dp_overlap = true;   // reduce gradients / gather parameters during backward / forward
  bool distributed_optimizer = true;  // optimizer state sharded over DP (ZeRO-1)
  // Expert rows of the busiest EP rank over the mean (1: balanced, as force-balanced routing
  // benchmarks run); every rank waits for the busiest at each combine.
  double expert_imbalance = 1.0;
  // How slots fill the P·V virtual stages: "" (Megatron's default: an even split, embedding and
  // loss counted as one layer each), "balanced" (contiguous stages of least maximum work), or a
  // Megatron pipeline layout such as "Et*4|(t*4|)*14tmL" (E embedding, t decoder layer, m MTP
  // layer, L loss, | stage boundary, *N repeat, parentheses group).
  std::string pp_layout;
  // The pipeline schedule (parallel/pipeline_schedule.h): interleaved 1F1B (1F1B with VPP 1,
  // combined 1F1B with the all-to-all overlap), zb1p, zbv or dualpipev (VPP 2, a V; its
  // overlapped pairs hide the all-to-all when a2a_overlap is on).
  PipelineScheduleKind schedule = PipelineScheduleKind::kInterleaved;
  // Kernels captured in CUDA graphs: "full" (the whole iteration, as the GB300 record ran:
  // launches cost nothing), "partial" (Megatron's attention/router/dense scopes: the MoE
  // dispatch, experts and combine launch kernel by kernel), "none" (every kernel launched).
  std::string cuda_graphs = "full";

  int64_t dp() const { return gpus / (tp * cp * pp); }          // data-parallel size
  int64_t edp() const { return gpus / (etp * ep * pp); }        // expert-data-parallel size
  int64_t micro_batches() const { return gbs / (mbs * dp()); }  // per rank per step
  int64_t stages() const { return pp * vpp; }                   // virtual pipeline stages
  // The schedule's spec for this layout (m micro-batches per rank).
  PipelineScheduleSpec schedule_spec(int64_t m) const;
};

// The format of a recipe's decoder GEMMs: the peak its GEMMs and its MFU are measured against.
inline ops::Format gemm_format(Recipe r) { return recipe_traits(r).decoder.fprop; }
// The MTP depth the layout uses.
int64_t mtp_depth(const ModelConfig& c, const SimLayout& l);
// Pipeline slots: decoder layers, MTP layers, and (with PP > 1) the embedding and the loss
// counted as one layer each, as Megatron's account_for_{embedding,loss}_in_pipeline_split do.
int64_t pipeline_slots(const ModelConfig& c, const SimLayout& l);
// Throws moet::Error with one line saying what does not divide or is out of range.
void validate(const ModelConfig& c, const SimLayout& l);
// The virtual stage of each slot (embedding, decoder layers, MTP layers, loss) for the default
// split or an explicit layout string (not "balanced": that needs the costs, step_model.cpp).
// Throws moet::Error with one line when a layout string does not fit the model or P·V.
std::vector<size_t> stages_of_slots(const ModelConfig& c, const SimLayout& l);
// The layout string of a slot -> stage assignment, in Megatron's syntax.
std::string format_pp_layout(const ModelConfig& c, const SimLayout& l,
                             const std::vector<size_t>& stage_of);
std::string describe(const SimLayout& l);  // "TP1 PP2 VPP8 EP32 ETP1 MBS1 GBS4096"
// What `moet train` lacks to run layout l: "" when it runs it, else the missing flags ("--tp 2",
// "--etp 2"), so the planner never recommends a layout as if the engine could run it.
std::string engine_lacks(const SimLayout& l);

}  // namespace moet::sim
