// Workspace: where a layer's buffers come from when it plans its memory for a (B, T) shape.
#pragma once
#include "core/arena.h"
#include "model/recompute.h"

namespace moet {

class WeightGrads;

struct Workspace {
  Workspace(Arena& act_arena, Arena& scratch_arena, int64_t b, int64_t t,
            RecomputeRegion* region = nullptr, RecomputeModules recomputed = {})
      : act(act_arena),
        scratch(scratch_arena),
        B(b),
        T(t),
        recompute(region),
        modules(recomputed) {}
  Arena& act;      // kept from forward to backward (one region per layer)
  Arena& scratch;  // temporaries of one layer call; the next layer reuses the same bytes
  int64_t B = 0;   // sequences per micro-batch
  int64_t T = 0;   // sequence length
  // --recompute-granularity selective: the region the recomputed modules' activations share
  // (null: none), and those modules.
  RecomputeRegion* recompute = nullptr;
  RecomputeModules modules;
  // --recompute-granularity full: the layer's whole forward runs again before its backward (act
  // is then the region it shares with other layers).
  bool recompute_whole = false;
  // Where the layers' weight gradients go (model/weight_grads.h): the model's, which computes
  // them at once or keeps them for a later W pass (null: at once).
  WeightGrads* wgrad = nullptr;

  int64_t N() const { return B * T; }
  bool recomputes(RecomputeModule m) const { return recompute && modules.has(m); }
  // Where module m keeps what its backward reads: the shared region when m is recomputed (its
  // forward runs again just before its backward), else act.
  Arena& kept(RecomputeModule m) const { return recomputes(m) ? recompute->for_module(m) : act; }
  // The workspace of a sub-layer that is module m as a whole (the MoE layer, an MLP): all it
  // keeps in kept(m).
  Workspace inside(RecomputeModule m) const {
    Workspace w{kept(m), scratch, B, T, recompute, modules};
    w.wgrad = wgrad;
    return w;
  }
};

// Gradient weights of the losses for one backward pass (see docs/model.md, "Losses").
struct LossScales {
  double grad_scale = 1.0;     // multiplies every loss gradient (1/grad_accum)
  double balance_alpha = 0.0;  // sequence-wise balance loss coefficient
  double z_loss_coef = 0.0;    // router z-loss coefficient
};

}  // namespace moet
