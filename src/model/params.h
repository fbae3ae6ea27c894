// ParamStore: every parameter of the model in one contiguous arena, with its gradient and the
// optimizer's moments in parallel arenas at the same offsets (so AdamW is a flat loop and a
// checkpoint is a few writes). Layers declare their weights first; allocate() then gives each
// declared Weight its memory. Hugging Face names map onto whole weights or onto slices of one
// (e.g. each expert's gate_proj is a slice of the layer's fused gate/up weight).
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace moet {

enum class Init { Normal, Ones, Zeros };

// A tensor-parallel part of a weight (model/tensor_parallel.h): dimension `dim` of the whole
// weight is `segments` equal blocks (SwiGLU's fused gate/up weight: two), each cut into `parts`
// equal parts, and the weight holds part `part` of every block, the blocks' parts side by side.
// parts == 1: the whole weight.
struct WeightShard {
  int dim = 0;
  int64_t segments = 1, part = 0, parts = 1;
  // TP-invariant sums (--deterministic): this part's pieces of the split dimension, of each
  // block (0: the weight is summed plainly).
  int64_t pieces = 0;
};

struct Weight {
  std::string name;  // storage name (a Hugging Face name when the weight is not fused)
  Tensor value;
  Tensor grad;
  Init init = Init::Normal;
  bool decay = true;      // AdamW weight decay applies (matrices and the embedding)
  bool trainable = true;  // false for buffers such as e_score_correction_bias
  bool expert = false;    // a routed expert's weight: sharded over expert parallelism
  // A read-only copy of a weight another pipeline stage trains (the embedding on the stage of
  // the MTP modules): not trainable here, not saved from here; its values arrive after each step.
  bool replica = false;
  int64_t offset = 0;  // element offset in the arenas
  // Index of element 0 in the full (unsharded) weight, so a shard initialises to the same
  // values as the same rows of the full weight.
  int64_t init_offset = 0;
  // A tensor-parallel part: the whole weight's shape and where each element lies in it.
  WeightShard shard;
  std::vector<int64_t> whole_shape() const;
  // Σ g² of the gradient: one fixed-order sum, or with shard.pieces each piece of the split
  // dimension summed apart in element order and the pieces added in the pairwise tree — so the
  // parts' values, added over the tensor-parallel group in the same tree, are one process's.
  double grad_square_sum() const;
  // Calls run(local, whole, n) for the runs of elements [begin, begin + n) of this weight that
  // lie contiguously in the whole weight (local and whole: element indices; whole without
  // init_offset) — one run for an unsharded weight.
  template <typename Fn>
  void for_each_run(int64_t begin, int64_t n, Fn&& run) const;

  // The weight's operands for low-precision GEMMs in the precision reserved for it
  // (ParamStore::reserve_operands), remade on first use after the parameters changed. Null when
  // it has none (fp32).
  const ops::WeightOperands* operands();

  ops::LinearPrecision operand_precision;  // reserved precision (fp32: none)
  ops::WeightOperands operand_copies;      // memory in the store's operand arena
  uint64_t operand_version = 0;            // parameter version the copies were made from
  const uint64_t* version = nullptr;       // the store's parameter version
};

template <typename Fn>
void Weight::for_each_run(int64_t begin, int64_t n, Fn&& run) const {
  if (shard.parts == 1) return run(begin, begin, n);
  // local index = (outer · S + d) · inner + i, d the index along the split dimension of size S
  int64_t inner = 1;
  for (int j = shard.dim + 1; j < value.ndim; ++j) inner *= value.shape[j];
  const int64_t S = value.shape[shard.dim], block = S / shard.segments;
  for (int64_t at = begin; at < begin + n;) {
    const int64_t outer = at / (S * inner), d = (at / inner) % S, i = at % inner;
    const int64_t seg = d / block, within = d % block;
    const int64_t whole_d = (seg * shard.parts + shard.part) * block + within;
    const int64_t whole = (outer * S * shard.parts + whole_d) * inner + i;
    const int64_t len = std::min(begin + n - at, (block - within) * inner - i);
    run(at, whole, len);
    at += len;
  }
}

// A named view (Hugging Face name) onto rows of one weight.
struct NamedSlice {
  const Weight* weight = nullptr;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  Tensor value() const;
  Tensor grad() const;
};

class ParamStore {
 public:
  // Declares a weight of the given shape; its tensors are valid after allocate(). The whole
  // weight is also registered under `name` unless expose_name is false (fused weights expose
  // their parts with add_name()).
  Weight* declare(const std::string& name, std::initializer_list<int64_t> shape, Init init,
                  bool decay, bool trainable = true, bool expose_name = true);
  // Registers a Hugging Face name for rows [row_begin, row_end) of dimension 0 of w (the shape
  // of the named tensor is the weight's shape with dimension 0 cut to those rows; for a 3-D
  // weight [E, R, C] the rows index the flattened [E*R, C]).
  void add_name(const std::string& name, const Weight* w, int64_t row_begin, int64_t row_end);

  // Bind mode: declare() returns the owner's weight of that name (same shape) instead of making
  // one, so a second Model (a second micro-batch lane) shares parameters and gradients.
  void bind(ParamStore& owner) { owner_ = &owner; }
  bool bound() const { return owner_ != nullptr; }
  // Shared mode: declaring a name already declared returns that weight (same shape), so the
  // model chunks and micro-batch slots of one pipeline rank declare into one store.
  void share_declarations() { share_ = true; }

  // Makes w (declared with this part's shape) a tensor-parallel part of a whole weight: it
  // initialises to the whole weight's values there, and checkpoints save it in the whole one.
  void set_shard(Weight* w, const WeightShard& shard);

  // Declares that w's GEMMs run in precision p, so allocate() gives it operand memory (nothing
  // for fp32). A weight has one precision; a bound store forwards to its owner.
  void reserve_operands(Weight* w, const ops::LinearPrecision& p);

  void allocate();
  bool allocated() const { return !values_.is_planning(); }

  // Parameter values change only through mark_updated(): whoever writes them (the optimizer
  // step, initialisation, a load) calls it, so low-precision weight operands are remade.
  uint64_t version() const { return owner_ ? owner_->version() : version_; }
  void mark_updated() { owner_ ? owner_->mark_updated() : void(++version_); }

  // Fills values: normal(0, std) from a counter-based RNG keyed by (seed, weight index), ones,
  // zeros.
  void initialize(uint64_t seed, double std);
  void zero_grads();

  const std::deque<Weight>& weights() const { return weights_; }
  std::deque<Weight>& weights() { return weights_; }
  const std::map<std::string, NamedSlice>& names() const { return names_; }
  const NamedSlice& named(const std::string& name) const;

  int64_t numel() const { return numel_; }
  // Bytes of the low-precision weight operand copies (0 in fp32).
  int64_t operand_bytes() const { return int64_t(operands_.capacity()); }
  Tensor all_values() const;  // the whole arena as one flat F32 tensor
  Tensor all_grads() const;

 private:
  std::deque<Weight> weights_;  // deque: declared Weight pointers stay valid
  std::map<std::string, NamedSlice> names_;
  int64_t numel_ = 0;
  ParamStore* owner_ = nullptr;
  bool share_ = false;
  Arena values_ = Arena::planning();
  Arena grads_ = Arena::planning();
  Arena operands_ = Arena::planning();
  uint64_t version_ = 1;
};

}  // namespace moet
