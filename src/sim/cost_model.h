// Cost of one micro-batch on one GPU, per pipeline slot (embedding, each decoder layer, each
// MTP layer, loss): every GEMM at a shape-dependent efficiency, core attention, memory-bound
// ops at HBM bandwidth, TP collectives, expert dispatch/combine volume and time, saved
// activations and parameters. The schedule (pipeline, overlap, data parallel) is step_model's.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "sim/parallel_layout.h"
#include "sim/system_spec.h"

namespace moet::sim {

// Seconds (forward / backward) of one slot for one micro-batch on one GPU.
struct SlotCost {
  std::string name;               // "embedding", "dense 0", "moe 3", "mtp 0", "loss"
  double gemm_f = 0, gemm_b = 0;  // GEMMs (FP8/MXFP8 where the precision says so)
  double attn_f = 0, attn_b = 0;  // core attention
  double mem_f = 0, mem_b = 0;    // memory-bound kernels (norms, activations, permutes, casts)
  double tp_f = 0, tp_b = 0;      // tensor-parallel all-gather / reduce-scatter (exposed)
  double cp_f = 0,
         cp_b = 0;  // context-parallel KV-latent all-gather / its gradient's reduce-scatter
  double launch_f = 0, launch_b = 0;  // per-kernel cost, and host launch time the GPU waits for
  // Kernels, forward / backward: all of them, and those of the MoE dispatch, experts and
  // combine (which partial CUDA graphs leave uncaptured).
  double kernels_f = 0, kernels_b = 0, expert_kernels_f = 0, expert_kernels_b = 0;
  double recompute = 0;         // forward work redone during backward (in the *_b above)
  double a2a_f = 0, a2a_b = 0;  // expert dispatch + combine (not yet overlapped)
  double dispatch_f = 0;        // the forward dispatch's part of a2a_f (the rest is the combine)
  // the part of fwd()/bwd() between the dispatch and the combine (routed and shared experts):
  // a forward runs [fwd − experts_f] dispatch [experts_f] combine, a backward the mirror
  double experts_f = 0, experts_b = 0;
  double a2a_bytes_nvlink = 0, a2a_bytes_scaleout = 0;  // sent per micro-batch, fwd+bwd
  double act_bytes = 0;                                 // activations saved for backward
  // seconds a zero-bubble schedule's I pass spends copying what its deferred W reads: the
  // weight-gradient GEMMs' input and output gradient (and their low-precision operands), each
  // read and written once (model/weight_grads.h)
  double wgrad_copy = 0;
  // activations recomputation makes again just before this slot's backward (not saved; the
  // rank holds one slot's at a time)
  double redo_bytes = 0;
  double dense_params = 0;   // parameters on this GPU, reduced over DP
  double expert_params = 0;  // parameters on this GPU, reduced over expert-DP
  double fwd() const { return gemm_f + attn_f + mem_f + tp_f + cp_f + launch_f; }
  double bwd() const { return gemm_b + attn_b + mem_b + tp_b + cp_b + launch_b; }
};

// Bytes of one activation element (2 on GPUs, 4 in fp32).
double activation_bytes(Recipe r);
// Efficiency of an [m,k]x[k,n] GEMM on one rank of `ranks`: gemm_max · Π x/(x + half_dim) over
// m, n, k (SystemSpec::gemm_half_dim says which half dimension a shared machine's rank sees).
double gemm_efficiency(const SystemSpec& s, ops::Format f, double m, double n, double k,
                       int ranks = 1);

// All slots in pipeline order: embedding, decoder layers, MTP layers, loss.
std::vector<SlotCost> slot_costs(const ModelConfig& c, const SimLayout& l, const SystemSpec& s);

}  // namespace moet::sim
