#include "metrics/flops.h"

#include "core/error.h"

namespace moet {

FlopBreakdown flops_breakdown(const ModelConfig& c, int64_t seq_len, bool with_mtp) {
  MOET_CHECK(seq_len > 0, "FLOP count: sequence length must be positive, got ", seq_len);
  const double h = static_cast<double>(c.hidden_size);
  const double V = static_cast<double>(c.vocab_size);
  const double S = static_cast<double>(seq_len);
  const double K = static_cast<double>(c.num_experts_per_tok);
  const double f = static_cast<double>(c.intermediate_size);
  const double f_e = static_cast<double>(c.moe_intermediate_size);
  const double f_s = static_cast<double>(c.shared_intermediate_size());
  const double e = 3.0;  // SwiGLU: gate, up and down GEMMs
  const double n = static_cast<double>(c.num_attention_heads);
  const double d_n = static_cast<double>(c.qk_nope_head_dim);
  const double d_r = static_cast<double>(c.qk_rope_head_dim);
  const double d_v = static_cast<double>(c.v_head_dim);
  const double r_q = static_cast<double>(c.q_lora_rank);
  const double r_kv = static_cast<double>(c.kv_lora_rank);
  const int64_t D = with_mtp ? c.num_nextn_predict_layers : 0;

  // Layer counts. MTP modules are full decoder blocks whose FFN is MoE when the last main layer
  // is MoE, dense otherwise (docs/model.md), so they join L_moe or L_dense and N = layers + D.
  // Counting the MTP block's experts in L_moe is what reproduces NVIDIA's published DeepSeek-V3
  // figures at S = 4096 (Megatron-Bridge's performance summary: the GB300 record's 1,648
  // TFLOP/s per GPU at 6,338 tokens/s) — 260.0 GFLOP/token with MTP (L_moe = 58 + 1), 249.8
  // without; leaving the MTP experts out would give 257.6.
  int64_t L_moe = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) L_moe += c.is_moe_layer(l) ? 1 : 0;
  int64_t L_dense = c.num_hidden_layers - L_moe;
  if (c.mtp_is_moe()) {
    L_moe += D;
  } else {
    L_dense += D;
  }
  const double N = static_cast<double>(c.num_hidden_layers + D);

  FlopBreakdown b;
  b.ffn = 6.0 * h *
          (f * e * static_cast<double>(L_dense) + (f_e * K + f_s) * e * static_cast<double>(L_moe));
  // Without a q LoRA (q_lora_rank 0) q is one h -> n(d_n+d_r) projection, as in Megatron.
  const double q_term = r_q > 0 ? r_q * (h + n * (d_n + d_r) + 1) : h * n * (d_n + d_r);
  const double kv_term = r_kv * (h + n * (d_n + d_v) + 1) + h * d_r;
  b.attn_proj = N * 6.0 * (q_term + kv_term + n * d_v * h);
  b.attn_core = N * 6.0 * S * (n * (d_n + d_r) / 2 + n * d_v / 2);
  b.mtp_proj = 6.0 * static_cast<double>(D) * (3 * h + 2 * h * h);
  b.logits = 6.0 * h * V * static_cast<double>(D + 1);
  return b;
}

double flops_per_token(const ModelConfig& c, int64_t seq_len, bool with_mtp) {
  return flops_breakdown(c, seq_len, with_mtp).total();
}

double model_tflops(double flops_per_token, double tokens, double seconds, int64_t devices) {
  if (!(seconds > 0) || devices <= 0) return 0.0;
  return flops_per_token * tokens / (seconds * static_cast<double>(devices) * 1e12);
}

}  // namespace moet
