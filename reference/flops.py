"""Model FLOPs per token, Megatron-Core's formula (FACTS.md §2).

Every GEMM counts 6 FLOPs per multiply-accumulate (forward, input-grad, weight-grad); the
causal core attention is halved; router GEMMs and norms are not counted.
"""

from config import ModelConfig


def flops_per_token(cfg: ModelConfig, seq_len: int, mtp: bool = True) -> float:
    """Training FLOPs per token at sequence length seq_len (include MTP modules if mtp)."""
    h, V = cfg.hidden_size, cfg.vocab_size
    K = cfg.num_experts_per_tok
    f, f_e = cfg.intermediate_size, cfg.moe_intermediate_size
    f_s = f_e * cfg.n_shared_experts
    e = 3                                               # SwiGLU: gate, up, down
    L = cfg.num_hidden_layers
    D = cfg.num_nextn_predict_layers if mtp else 0
    L_dense = min(cfg.first_k_dense_replace, L)
    L_moe = L - L_dense
    # MTP blocks count as MoE layers when the last main layer is MoE, else as dense.
    if cfg.is_moe_layer(L - 1):
        L_moe += D
    else:
        L_dense += D
    N = L + D
    n = cfg.num_attention_heads
    d_n, d_r, d_v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    r_q, r_kv = cfg.q_lora_rank, cfg.kv_lora_rank
    S = seq_len

    ffn = 6 * h * (f * e * L_dense + (f_e * K + f_s) * e * L_moe)
    attn_proj = N * 6 * (r_q * (h + n * (d_n + d_r) + 1)
                         + r_kv * (h + n * (d_n + d_v) + 1)
                         + h * d_r + n * d_v * h)
    core_attn = N * 6 * S * (n * (d_n + d_r) / 2 + n * d_v / 2)
    mtp_extra = 6 * D * (3 * h + 2 * h * h)
    logits = 6 * h * V * (D + 1)
    return float(ffn + attn_proj + core_attn + mtp_extra + logits)


if __name__ == "__main__":
    import argparse
    from config import load_config
    ap = argparse.ArgumentParser(description="Megatron FLOPs/token of a HF DeepSeek-V3 config")
    ap.add_argument("config")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--no-mtp", action="store_true")
    a = ap.parse_args()
    c = load_config(a.config)
    print(f"{flops_per_token(c, a.seq, mtp=not a.no_mtp) / 1e9:.3f} GFLOP/token")
