// The KV cache of incremental decoding (docs/generate.md): per decoder layer, MLA's compressed
// latent of every position so far — the normalised c_kv (kv_lora_rank wide) and the shared,
// rotated RoPE key k_pe (qk_rope_head_dim wide) — never the per-head keys and values, which
// attention recovers by absorbing kv_b_proj into the queries and outputs. Also the RoPE tables
// for every position the cache can hold.
#pragma once
#include <cstdint>
#include <vector>

#include "model/attention.h"
#include "model/config.h"

namespace moet {

// Temporaries of one cached attention call, shared by the layers (resized, never shrunk).
struct DecodeScratch {
  std::vector<float> qn, qr, qc, scores, oc, v;
};

// One decoder layer's part of the cache: rows are positions.
struct LatentCache {
  Tensor ckv_SC;  // normalised compressed kv, [capacity, kv_lora_rank]
  Tensor kpe_SR;  // rotated shared rope key, [capacity, qk_rope_head_dim]
  DecodeScratch* scratch = nullptr;
};

class KvCache {
 public:
  // Room for `capacity` positions (at most max_position_embeddings) of every decoder layer.
  KvCache(const ModelConfig& c, int64_t capacity);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }  // positions held
  void clear() { length_ = 0; }
  // Marks n more positions as held (after a forward wrote their rows).
  void advance(int64_t n);
  LatentCache& layer(int64_t l) { return layers_[l]; }
  // The RoPE tables of positions [pos, pos + n) (rope_forward indexes them from 0).
  RopeCache rope_at(int64_t pos, int64_t n) const;

  // Bytes per position over all decoder layers: this cache's (latent + rope key), and what a
  // cache of the expanded per-head keys and values would take — both in fp32.
  static int64_t bytes_per_token(const ModelConfig& c);
  static int64_t expanded_bytes_per_token(const ModelConfig& c);

 private:
  int64_t capacity_, length_ = 0;
  std::vector<float> mem_;
  std::vector<LatentCache> layers_;
  std::vector<float> cos_, sin_;
  Tensor cos_TR2_, sin_TR2_;
  double softmax_scale_ = 1.0;
  DecodeScratch scratch_;
};

}  // namespace moet
