"""Model configuration: parse a Hugging Face DeepSeek-V3 config.json (docs/model.md).

Only the fields the model contract uses are read; anything the reference does not
implement (other scoring functions, attention biases, no q LoRA, ...) is rejected with a
clear error rather than silently mis-modelled.
"""

import json
import math
from dataclasses import dataclass, field


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int                 # D
    intermediate_size: int           # dense FFN width
    moe_intermediate_size: int       # expert FFN width
    num_hidden_layers: int           # L
    first_k_dense_replace: int
    num_attention_heads: int         # H
    q_lora_rank: int                 # Q
    kv_lora_rank: int                # C
    qk_nope_head_dim: int            # P
    qk_rope_head_dim: int            # R
    v_head_dim: int                  # U
    n_routed_experts: int            # E
    n_shared_experts: int
    num_experts_per_tok: int         # K
    n_group: int                     # G
    topk_group: int
    routed_scaling_factor: float
    norm_topk_prob: bool
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict = field(default_factory=dict)   # {} when absent
    num_nextn_predict_layers: int = 0                 # D (MTP depth)
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02

    # ---- derived helpers -------------------------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        """True if decoder block `layer` (MTP blocks included) has an MoE FFN.

        Main layers: MoE iff layer >= first_k_dense_replace.  MTP blocks (layer >= L) are
        MoE iff the last main layer is MoE (docs/model.md, Multi-token prediction).
        """
        if layer >= self.num_hidden_layers:
            return self.is_moe_layer(self.num_hidden_layers - 1)
        return layer >= self.first_k_dense_replace

    @property
    def num_total_layers(self) -> int:
        """Main layers plus MTP modules."""
        return self.num_hidden_layers + self.num_nextn_predict_layers

    def moe_layers(self):
        return [l for l in range(self.num_total_layers) if self.is_moe_layer(l)]

    # ---- parsing ---------------------------------------------------------------------
    @staticmethod
    def from_hf(cfg: dict) -> "ModelConfig":
        def get(name, default=None, required=True):
            if name in cfg and cfg[name] is not None:
                return cfg[name]
            if required and default is None:
                raise ValueError(f"config: missing required field '{name}'")
            return default

        # Reject features outside the contract.
        if get("scoring_func", "sigmoid") != "sigmoid":
            raise ValueError("config: only scoring_func 'sigmoid' is supported")
        if get("topk_method", "noaux_tc") != "noaux_tc":
            raise ValueError("config: only topk_method 'noaux_tc' is supported")
        if get("hidden_act", "silu") != "silu":
            raise ValueError("config: only hidden_act 'silu' is supported")
        if cfg.get("attention_bias"):
            raise ValueError("config: attention_bias=true is not supported")
        if cfg.get("q_lora_rank") in (None, 0):
            raise ValueError("config: q_lora_rank must be set (MLA with q LoRA)")
        heads = int(get("num_attention_heads"))
        kvh = cfg.get("num_key_value_heads")
        if kvh is not None and int(kvh) != heads:
            raise ValueError("config: num_key_value_heads must equal num_attention_heads (MLA)")

        rs = cfg.get("rope_scaling") or {}
        c = ModelConfig(
            vocab_size=int(get("vocab_size")),
            hidden_size=int(get("hidden_size")),
            intermediate_size=int(get("intermediate_size")),
            moe_intermediate_size=int(get("moe_intermediate_size")),
            num_hidden_layers=int(get("num_hidden_layers")),
            first_k_dense_replace=int(get("first_k_dense_replace", 0, False)),
            num_attention_heads=heads,
            q_lora_rank=int(get("q_lora_rank")),
            kv_lora_rank=int(get("kv_lora_rank")),
            qk_nope_head_dim=int(get("qk_nope_head_dim")),
            qk_rope_head_dim=int(get("qk_rope_head_dim")),
            v_head_dim=int(get("v_head_dim")),
            n_routed_experts=int(get("n_routed_experts")),
            n_shared_experts=int(get("n_shared_experts", 0, False)),
            num_experts_per_tok=int(get("num_experts_per_tok")),
            n_group=int(get("n_group", 1, False)),
            topk_group=int(get("topk_group", 1, False)),
            routed_scaling_factor=float(get("routed_scaling_factor", 1.0, False)),
            norm_topk_prob=bool(get("norm_topk_prob", False, False)),
            rms_norm_eps=float(get("rms_norm_eps", 1e-6, False)),
            rope_theta=float(get("rope_theta", 10000.0, False)),
            rope_scaling=dict(rs),
            num_nextn_predict_layers=int(get("num_nextn_predict_layers", 0, False)),
            tie_word_embeddings=bool(get("tie_word_embeddings", False, False)),
            initializer_range=float(get("initializer_range", 0.02, False)),
        )
        c.validate()
        return c

    def validate(self):
        E, G, K = self.n_routed_experts, self.n_group, self.num_experts_per_tok
        if self.qk_rope_head_dim % 2:
            raise ValueError("config: qk_rope_head_dim must be even (interleaved RoPE pairs)")
        if E % G:
            raise ValueError(f"config: n_routed_experts {E} not divisible by n_group {G}")
        if not 1 <= self.topk_group <= G:
            raise ValueError(f"config: topk_group {self.topk_group} must be in 1..{G}")
        if K > self.topk_group * (E // G):
            raise ValueError("config: num_experts_per_tok exceeds the experts in kept groups")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError("config: first_k_dense_replace > num_hidden_layers")


def load_config(path: str) -> ModelConfig:
    """Parse a Hugging Face config.json file."""
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read config {path}: {e}") from e
    return ModelConfig.from_hf(raw)


def load_config_dict(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
