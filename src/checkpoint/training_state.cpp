#include "checkpoint/training_state.h"

#include <algorithm>

#include "checkpoint/checkpoint_index.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "parallel/zero1.h"

namespace moet {

namespace {

std::vector<int64_t> global_shape(const Weight& w, int ep) {
  std::vector<int64_t> s = w.whole_shape();
  if (w.expert && !s.empty()) s[0] *= ep;  // [local experts, ...] -> [all experts, ...]
  return s;
}

// A piece of a moment: n elements of the flat moment view `all` from element `at`, in its dtype.
StatePiece moment_piece(const std::string& tensor, const std::vector<int64_t>& shape, int64_t begin,
                        int64_t n, const Tensor& all, int64_t at) {
  StatePiece p{tensor, shape, begin, n};
  if (all.dtype == DType::BF16)
    p.bf16 = all.bf16() + at;
  else
    p.data = all.f32() + at;
  return p;
}

// The pieces of weight w's elements [begin, begin + n) in `tensor`, whose values are `all`'s from
// flat index `at`: one per run of the weight in the whole tensor (one unless it is a
// tensor-parallel part).
void add_pieces(std::vector<StatePiece>& out, const std::string& tensor,
                const std::vector<int64_t>& shape, const Weight& w, int64_t begin, int64_t n,
                const Tensor& all, int64_t at) {
  w.for_each_run(begin, n, [&](int64_t local, int64_t whole, int64_t len) {
    out.push_back(moment_piece(tensor, shape, w.init_offset + whole, len, all, at + local - begin));
  });
}

}  // namespace

std::vector<StatePiece> training_state_pieces(const StateHolder& h, bool owned_only) {
  MOET_ASSERT(h.params != nullptr);
  const bool own_dense = !owned_only || h.world_rank == 0;
  const bool own_expert = !owned_only || h.edp_rank == 0;
  const bool moments = h.adamw && h.adamw->has_moments();
  std::vector<StatePiece> out;
  const auto& weights = h.params->weights();
  for (const Weight& w : weights) {
    // a weight every tensor-parallel part holds whole is written by part 0's
    const bool own_replicated = own_dense && (!owned_only || w.shard.parts > 1 || h.tp_part == 0);
    if (!(w.expert ? own_expert : own_replicated)) continue;
    if (owned_only && w.replica) continue;  // the stage that trains it saves it
    const std::vector<int64_t> shape = global_shape(w, h.ep);
    const int64_t n = w.value.numel();
    add_pieces(out, "param/" + w.name, shape, w, 0, n, w.value, 0);
    if (moments && w.trainable) {
      add_pieces(out, "adam_m/" + w.name, shape, w, 0, n, h.adamw->moment1(), w.offset);
      add_pieces(out, "adam_v/" + w.name, shape, w, 0, n, h.adamw->moment2(), w.offset);
    }
  }
  if (!h.zero1) return out;
  // ZeRO-1: each range of arena elements, cut at weight boundaries. Weights are laid out in the
  // arena in declaration order, so a binary search by offset finds the first one.
  std::vector<const Weight*> by_offset;
  for (const Weight& w : weights) by_offset.push_back(&w);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Weight* a, const Weight* b) { return a->offset < b->offset; });
  for (const Zero1::MomentRange& r : h.zero1->moment_ranges()) {
    auto it = std::upper_bound(by_offset.begin(), by_offset.end(), r.offset,
                               [](int64_t off, const Weight* w) { return off < w->offset; });
    MOET_ASSERT(it != by_offset.begin());
    --it;
    for (int64_t at = r.offset; at < r.offset + r.n; ++it) {
      MOET_ASSERT(it != by_offset.end());
      const Weight& w = **it;
      const int64_t wend = w.offset + w.value.numel();
      if (wend <= at) continue;
      MOET_ASSERT(w.offset <= at && w.trainable);
      const int64_t len = std::min(wend, r.offset + r.n) - at;
      if (owned_only && w.shard.parts == 1 && h.tp_part != 0) {  // part 0 writes replicated ones
        at += len;
        continue;
      }
      const std::vector<int64_t> shape = global_shape(w, h.ep);
      const int64_t in_weight = at - w.offset, local = at - r.offset;
      add_pieces(out, "adam_m/" + w.name, shape, w, in_weight, len, r.m, local);
      add_pieces(out, "adam_v/" + w.name, shape, w, in_weight, len, r.v, local);
      at += len;
    }
  }
  return out;
}

}  // namespace moet
