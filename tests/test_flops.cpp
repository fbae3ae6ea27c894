// Megatron-Core FLOP formula (Megatron-LM's num_floating_point_operations) against the published
// DeepSeek-V3 figures (NVIDIA's GB300 record: 1,648 TFLOP/s per GPU at 6,338 tokens/s).
#include <gtest/gtest.h>

#include "metrics/flops.h"
#include "model/config.h"

using namespace moet;

namespace {

// configs/deepseek-v3-671b.json, field by field.
ModelConfig deepseek_v3() {
  ModelConfig c;
  c.vocab_size = 129280;
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.moe_intermediate_size = 2048;
  c.num_hidden_layers = 61;
  c.first_k_dense_replace = 3;
  c.num_attention_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 256;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 8;
  c.n_group = 8;
  c.topk_group = 4;
  c.num_nextn_predict_layers = 1;
  return c;
}

}  // namespace

TEST(Flops, DeepSeekV3MatchesMegatron) {
  const ModelConfig c = deepseek_v3();
  EXPECT_NEAR(flops_per_token(c, 4096, true) / 1e9, 260.0, 0.05);
  EXPECT_NEAR(flops_per_token(c, 4096, false) / 1e9, 249.8, 0.05);
  const FlopBreakdown b = flops_breakdown(c, 4096, true);
  EXPECT_DOUBLE_EQ(b.total(), flops_per_token(c, 4096, true));
  EXPECT_DOUBLE_EQ(b.logits, 6.0 * 7168 * 129280 * 2);
  EXPECT_DOUBLE_EQ(b.mtp_proj, 6.0 * (3 * 7168 + 2.0 * 7168 * 7168));
  // Core attention grows linearly with the sequence length.
  const FlopBreakdown b2 = flops_breakdown(c, 8192, true);
  EXPECT_DOUBLE_EQ(b2.attn_core, 2 * b.attn_core);
  EXPECT_DOUBLE_EQ(b2.ffn, b.ffn);
}

TEST(Flops, DeepSeekV3FromConfigFile) {
  const ModelConfig c = load_model_config(MOET_SOURCE_DIR "/configs/deepseek-v3-671b.json");
  EXPECT_NEAR(flops_per_token(c, 4096, true) / 1e9, 260.0, 0.05);
  EXPECT_NEAR(flops_per_token(c, 4096, false) / 1e9, 249.8, 0.05);
}

TEST(Flops, MtpBlockIsDenseWhenTheLastLayerIsDense) {
  ModelConfig c = deepseek_v3();
  c.first_k_dense_replace = c.num_hidden_layers;  // every layer dense
  const double h = 7168, f = 18432;
  const double with = flops_breakdown(c, 4096, true).ffn;
  const double without = flops_breakdown(c, 4096, false).ffn;
  EXPECT_DOUBLE_EQ(with - without, 6 * h * f * 3);  // one more dense MLP
  EXPECT_DOUBLE_EQ(without, 6 * h * f * 3 * 61);
}

TEST(Flops, ModelTflops) {
  EXPECT_DOUBLE_EQ(model_tflops(2e9, 1000, 2.0, 1), 1.0);
  EXPECT_DOUBLE_EQ(model_tflops(2e9, 1000, 1.0, 4), 0.5);
  EXPECT_EQ(model_tflops(2e9, 1000, 0.0), 0.0);
}
