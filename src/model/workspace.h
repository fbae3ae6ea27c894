// Workspace: where a layer's buffers come from when it plans its memory for a (B, T) shape.
#pragma once
#include "core/arena.h"

namespace moet {

struct Workspace {
  Arena& act;      // kept from forward to backward (one region per layer)
  Arena& scratch;  // temporaries of one layer call; the next layer reuses the same bytes
  int64_t B = 0;   // sequences per micro-batch
  int64_t T = 0;   // sequence length
  int64_t N() const { return B * T; }
};

// Gradient weights of the losses for one backward pass (see docs/model.md, "Losses").
struct LossScales {
  double grad_scale = 1.0;     // multiplies every loss gradient (1/grad_accum)
  double balance_alpha = 0.0;  // sequence-wise balance loss coefficient
  double z_loss_coef = 0.0;    // router z-loss coefficient
};

}  // namespace moet
