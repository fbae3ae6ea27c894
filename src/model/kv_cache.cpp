#include "model/kv_cache.h"

#include "core/error.h"
#include "model/rope.h"

namespace moet {

KvCache::KvCache(const ModelConfig& c, int64_t capacity) : capacity_(capacity) {
  MOET_CHECK(capacity > 0 && capacity <= c.max_position_embeddings, "a KV cache of ", capacity,
             " positions: the model takes 1 to ", c.max_position_embeddings,
             " (max_position_embeddings)");
  const int64_t L = c.num_hidden_layers, C = c.kv_lora_rank, R = c.qk_rope_head_dim;
  mem_.assign(size_t(L * capacity * (C + R)), 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    float* base = mem_.data() + l * capacity * (C + R);
    layers_.push_back(LatentCache{Tensor(base, DType::F32, {capacity, C}),
                                  Tensor(base + capacity * C, DType::F32, {capacity, R}),
                                  &scratch_});
  }
  cos_.resize(size_t(capacity * (R / 2)));
  sin_.resize(cos_.size());
  cos_TR2_ = Tensor(cos_.data(), DType::F32, {capacity, R / 2});
  sin_TR2_ = Tensor(sin_.data(), DType::F32, {capacity, R / 2});
  fill_rope_tables(c, cos_TR2_, sin_TR2_);
  softmax_scale_ = attention_softmax_scale(c);
}

void KvCache::advance(int64_t n) {
  MOET_ASSERT(n >= 0 && length_ + n <= capacity_);
  length_ += n;
}

RopeCache KvCache::rope_at(int64_t pos, int64_t n) const {
  MOET_ASSERT(pos >= 0 && n > 0 && pos + n <= capacity_);
  return RopeCache{cos_TR2_.rows(pos, pos + n), sin_TR2_.rows(pos, pos + n), softmax_scale_};
}

int64_t KvCache::bytes_per_token(const ModelConfig& c) {
  return c.num_hidden_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * int64_t(sizeof(float));
}

int64_t KvCache::expanded_bytes_per_token(const ModelConfig& c) {
  return c.num_hidden_layers * c.num_attention_heads * (c.qk_head_dim() + c.v_head_dim) *
         int64_t(sizeof(float));
}

}  // namespace moet
