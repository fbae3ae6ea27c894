// AdamW over a ParamStore: moments in two arenas parallel to the parameters, decoupled weight
// decay on matrices only, global gradient-norm clipping. Each moment is stored in fp32 or bf16
// (the precision-aware optimizer, --exp-avg-dtype / --exp-avg-sq-dtype); the update is computed in
// fp32 either way (ops::adamw_update).
#pragma once
#include <vector>

#include "core/arena.h"
#include "kernels/ops.h"
#include "model/params.h"

namespace moet {

// How AdamW stores its moments: m (exp_avg) and v (exp_avg_sq), each DType::F32 or DType::BF16.
struct MomentDtypes {
  DType m = DType::F32, v = DType::F32;
  // Bytes of both moments per parameter: 8 in fp32, 4 in bf16.
  int64_t bytes_per_param() const { return int64_t(dtype_size(m) + dtype_size(v)); }
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0: no clipping
  MomentDtypes moments;
};

// Σ g² of each trainable weight, in declaration order: a dense weight's from ops::sum_squares,
// an expert weight's its experts' sums added in tree_sum order. Under expert parallelism each
// rank holds a block of the experts; adding the ranks' expert entries in tree_sum order gives
// the one-process entries bit for bit.
struct SquareSums {
  std::vector<double> sq;
  std::vector<char> expert;
  // sqrt of the dense entries added in order, then the expert entries added in order (the
  // order every layout reproduces).
  double norm() const;
};

class AdamW {
 public:
  // allocate_moments = false: no moment arenas (ZeRO-1 keeps the moments of its shard itself,
  // src/parallel/zero1.h); step() is then an error, the rest works.
  AdamW(ParamStore& ps, AdamWConfig cfg, bool allocate_moments = true);
  // sqrt(Σ g²) over trainable parameters.
  double grad_norm() const;
  // This process's gradients' sums, weight by weight.
  void grad_square_sums(SquareSums& out) const;
  // Clips (when grad_clip > 0), then one AdamW step at learning rate lr. Returns the norm
  // before clipping.
  double step(double lr) { return step(lr, grad_norm()); }
  // The same with the norm given (data parallelism computes it across ranks).
  double step(double lr, double grad_norm);
  // The factor clipping scales gradients by for this norm (1 without clipping).
  double clip_factor(double grad_norm) const;
  const AdamWConfig& config() const { return cfg_; }
  bool has_moments() const { return !m_.is_planning(); }
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // Flat views of every moment, in the ParamStore's arena order and their stored dtype.
  Tensor moment1() const { return m_all_; }
  Tensor moment2() const { return v_all_; }
  // Bytes of the two moment arenas (0 without moments).
  int64_t moment_bytes() const {
    return has_moments() ? int64_t(m_all_.bytes() + v_all_.bytes()) : 0;
  }

 private:
  ParamStore& ps_;
  AdamWConfig cfg_;
  Arena m_, v_;
  Tensor m_all_, v_all_;
  int64_t t_ = 0;
  mutable SquareSums sums_;
};

}  // namespace moet
