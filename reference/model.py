"""Independent PyTorch reference of the DeepSeek-V3-style model that moet trains.

Written from docs/model.md (the contract) and FACTS.md §1.  Backward is autograd: this file
is the independent check of the C++ engine's hand-written backward.

Module names are chosen so that `named_parameters()` / `named_buffers()` yield exactly the
Hugging Face DeepSeek-V3 tensor names (FACTS.md §5), e.g.
`model.layers.1.mlp.experts.3.up_proj.weight`.  MTP module k (1-based) lives at
`model.layers.{num_hidden_layers + k - 1}`.

Shapes follow the docs' letters: B sequences, T positions, N = B*T tokens, D hidden, H heads,
E routed experts, K experts per token, V vocabulary.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from config import ModelConfig
from quant import (FP4, Bf16Attention, attention_format, combine_format, decoder_format,
                   dispatch_format, head_format, quantize_ste, quantized_linear)
from rope import apply_rope, rope_tables, softmax_scale


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype for statistics / router math: fp32, or float64 when the model is float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ------------------------------------------------------------------------------------------
# Building blocks
# ------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) * w, statistics in fp32 (float64 for a float64 model)."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sd = _stat_dtype(x.dtype)
        xf = x.to(sd)
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(sd)).to(x.dtype)


class Linear(nn.Linear):
    """Bias-free linear layer (weight [out, in] as in HF) whose GEMMs run in number format
    `fmt` (reference/quant.py; "fp32" is the plain product, the default)."""

    fmt = "fp32"

    def forward(self, x: torch.Tensor, x_in_format: bool = False) -> torch.Tensor:
        if self.fmt == "fp32":
            return F.linear(x, self.weight)
        return quantized_linear(x, self.weight, self.fmt, x_in_format)


def _linear(d_in: int, d_out: int, dtype: torch.dtype) -> Linear:
    """Bias-free linear layer; weight stored [out_features, in_features] as in HF."""
    return Linear(d_in, d_out, bias=False, dtype=dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): dense MLP, routed expert and shared expert alike.

    In a low-precision format the gate and up projections are one linear layer with the
    weight [gate; up] ([2F, D], as moet stores it), so FP8 blocks may span both halves."""

    def __init__(self, d: int, width: int, dtype: torch.dtype):
        super().__init__()
        self.gate_proj = _linear(d, width, dtype)
        self.up_proj = _linear(d, width, dtype)
        self.down_proj = _linear(width, d, dtype)
        self.fmt = "fp32"

    def set_format(self, fmt: str):
        self.fmt = fmt
        for lin in (self.gate_proj, self.up_proj, self.down_proj):
            lin.fmt = fmt

    def forward(self, x: torch.Tensor, x_in_format: bool = False) -> torch.Tensor:
        """x_in_format: x already holds the fprop operand (the MoE's dispatched rows)."""
        if self.fmt == "fp32":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        w = torch.cat([self.gate_proj.weight, self.up_proj.weight], 0)
        g, u = quantized_linear(x, w, self.fmt, x_in_format).split(self.gate_proj.out_features, -1)
        return self.down_proj(F.silu(g) * u)


class MLA(nn.Module):
    """Multi-head latent attention with q LoRA, compressed KV and one shared rope key."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype):
        super().__init__()
        D, H = cfg.hidden_size, cfg.num_attention_heads
        self.H, self.Q, self.C = H, cfg.q_lora_rank, cfg.kv_lora_rank
        self.P, self.R, self.U = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.scale = softmax_scale(cfg)
        self.q_a_proj = _linear(D, self.Q, dtype)
        self.q_a_layernorm = RMSNorm(self.Q, cfg.rms_norm_eps, dtype)
        self.q_b_proj = _linear(self.Q, H * (self.P + self.R), dtype)
        self.kv_a_proj_with_mqa = _linear(D, self.C + self.R, dtype)
        self.kv_a_layernorm = RMSNorm(self.C, cfg.rms_norm_eps, dtype)
        self.kv_b_proj = _linear(self.C, H * (self.P + self.U), dtype)
        self.o_proj = _linear(H * self.U, D, dtype)

    def set_format(self, fmt: str, attn_fmt: str = "fp32"):
        """The five projections' format, and core attention's (fp32, or bf16 operands)."""
        for lin in (self.q_a_proj, self.q_b_proj, self.kv_a_proj_with_mqa, self.kv_b_proj,
                    self.o_proj):
            lin.fmt = fmt
        self.attn_fmt = attn_fmt

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D]; cos/sin: [T, R/2] -> [B, T, D]."""
        B, T, _ = x.shape
        H, P, R, U, C = self.H, self.P, self.R, self.U, self.C

        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, H, P + R)
        q_nope, q_rope = q.split([P, R], dim=-1)

        ckv = self.kv_a_proj_with_mqa(x)                           # [B, T, C+R]
        c, k_rope = ckv.split([C, R], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(B, T, H, P + U)
        k_nope, v = kv.split([P, U], dim=-1)

        q_rope = apply_rope(q_rope, cos[:, None, :], sin[:, None, :])   # [B, T, H, R]
        k_rope = apply_rope(k_rope, cos, sin)                            # [B, T, R]

        q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2)          # [B, H, T, P+R]
        k = torch.cat([k_nope, k_rope[:, :, None, :].expand(B, T, H, R)], dim=-1)
        k = k.transpose(1, 2)                                            # [B, H, T, P+R]
        v = v.transpose(1, 2)                                            # [B, H, T, U]

        if getattr(self, "attn_fmt", "fp32") == "bf16":
            o = Bf16Attention.apply(q, k, v, self.scale).transpose(1, 2).reshape(B, T, H * U)
            return self.o_proj(o)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale      # [B, H, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        p = torch.softmax(scores.to(_stat_dtype(x.dtype)), dim=-1).to(x.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B, T, H * U)
        return self.o_proj(o)


# ------------------------------------------------------------------------------------------
# Routing
# ------------------------------------------------------------------------------------------
def _stable_topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries along the last dim, in descending value order,
    ties broken by lower index first (stable descending sort)."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]


def select_experts(sel: torch.Tensor, n_group: int, topk_group: int, k: int):
    """Group-limited top-k on selection scores sel [N, E] (already s + bias).

    Group score = sum of the (up to) 2 largest sel in each group of E/G consecutive experts.
    Keep the topk_group best groups (ties: lower group first); choose the k largest sel among
    experts in kept groups (ties: lower expert first), listed in descending sel order.
    Returns (chosen [N, k] int64, kept_groups [N, topk_group] int64).
    """
    N, E = sel.shape
    gs = E // n_group
    grouped = sel.view(N, n_group, gs)
    top2 = grouped.topk(min(2, gs), dim=-1).values.sum(-1)             # [N, G]
    kept = _stable_topk_indices(top2, topk_group)                       # [N, topk_group]
    group_mask = torch.zeros(N, n_group, dtype=torch.bool, device=sel.device)
    group_mask.scatter_(1, kept, True)
    expert_mask = group_mask[:, :, None].expand(N, n_group, gs).reshape(N, E)
    masked = sel.masked_fill(~expert_mask, float("-inf"))
    chosen = _stable_topk_indices(masked, k).contiguous()
    return chosen, kept


def routing_margin(sel: torch.Tensor, n_group: int, topk_group: int, k: int) -> float:
    """Smallest gap, over tokens, at a selection boundary: between the topk_group-th and the
    next group score, and between the k-th and the next selection score among kept experts.
    A tiny margin means a lower-precision implementation may legitimately route differently."""
    N, E = sel.shape
    gs = E // n_group
    top2 = sel.view(N, n_group, gs).topk(min(2, gs), dim=-1).values.sum(-1)
    margin = float("inf")
    if topk_group < n_group:
        g_sorted = top2.sort(dim=-1, descending=True).values
        margin = min(margin, (g_sorted[:, topk_group - 1] - g_sorted[:, topk_group]).min().item())
    chosen, kept = select_experts(sel, n_group, topk_group, k)
    group_mask = torch.zeros(N, n_group, dtype=torch.bool, device=sel.device).scatter_(1, kept, True)
    masked = sel.masked_fill(~group_mask[:, :, None].expand(N, n_group, gs).reshape(N, E), float("-inf"))
    e_sorted = masked.sort(dim=-1, descending=True).values
    if k < topk_group * gs:
        margin = min(margin, (e_sorted[:, k - 1] - e_sorted[:, k]).min().item())
    return margin


class Router(nn.Module):
    """`mlp.gate`: weight [E, D] (no bias) and the non-trainable e_score_correction_bias [E]."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size, dtype=dtype))
        # Saved with the parameters but never trained by gradient (aux-loss-free balancing).
        self.register_buffer("e_score_correction_bias",
                             torch.zeros(cfg.n_routed_experts, dtype=dtype))


@dataclass
class MoEAux:
    """Per-layer router statistics returned alongside the MoE output."""
    balance_loss: torch.Tensor      # scalar, sequence-wise balance loss (mean over b)
    z_loss: torch.Tensor            # scalar, mean over tokens of logsumexp(logits)²
    load: torch.Tensor              # [E] int64, (token, expert) assignments in this micro-batch
    chosen: torch.Tensor            # [N, K] int64


class MoE(nn.Module):
    """Routed SwiGLU experts (one parameter set each) plus the shared expert."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype):
        super().__init__()
        self.cfg = cfg
        D = cfg.hidden_size
        self.gate = Router(cfg, dtype)
        self.experts = nn.ModuleList(
            SwiGLU(D, cfg.moe_intermediate_size, dtype) for _ in range(cfg.n_routed_experts))
        if cfg.n_shared_experts > 0:
            self.shared_experts = SwiGLU(D, cfg.moe_intermediate_size * cfg.n_shared_experts, dtype)
        else:
            self.shared_experts = None
        self.fmt = "fp32"           # experts' (and shared expert's) linears, dispatched rows
        self.combine_fmt = "fp32"   # experts' outputs before the combine

    def set_format(self, fmt: str, combine_fmt: str):
        self.fmt, self.combine_fmt = fmt, combine_fmt
        for ex in self.experts:
            ex.set_format(fmt)
        if self.shared_experts is not None:
            self.shared_experts.set_format(fmt)

    def forward(self, x: torch.Tensor):
        """x: [B, T, D] -> (y [B, T, D], MoEAux)."""
        cfg = self.cfg
        B, T, D = x.shape
        N, E, K = B * T, cfg.n_routed_experts, cfg.num_experts_per_tok
        xf = x.reshape(N, D)

        # Router in fp32 (float64 for a float64 model), no bias in the logits.
        rdt = _stat_dtype(x.dtype)
        logits = F.linear(xf.to(rdt), self.gate.weight.to(rdt))            # [N, E]
        s = torch.sigmoid(logits)
        sel = s.detach() + self.gate.e_score_correction_bias.to(rdt)      # for choosing only
        chosen, _ = select_experts(sel, cfg.n_group, cfg.topk_group, K)    # [N, K]

        # Gates: unbiased s of the chosen experts, normalised, times the scaling factor.
        w = s.gather(1, chosen)                                             # [N, K]
        if cfg.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        w = w * cfg.routed_scaling_factor

        # Dispatch: sort the N*K assignments by expert, one matmul chain per expert on its
        # contiguous slice, scale by the gate, scatter-add back to the tokens.
        flat = chosen.reshape(-1)                                           # [M]
        order = torch.sort(flat, stable=True).indices                       # [M]
        load = torch.bincount(flat, minlength=E)                            # [E]
        tok = order // K                                                    # token of each row
        # Low precision: the rows travel in the experts' fprop format (quantized 1 x b along
        # D here, straight-through in backward) and the experts use them as they are; under
        # the 4-bit recipes they travel in bf16 and each expert quantizes its own rows.
        low = self.fmt != "fp32"
        x_disp = quantize_ste(xf, dispatch_format(self.fmt), "rows") if low else xf
        x_perm = x_disp.index_select(0, tok)                                # [M, D]
        w_perm = w.reshape(-1).index_select(0, order).to(x.dtype)           # [M]
        outs = []
        for e, xe in enumerate(x_perm.split(load.tolist())):
            if xe.shape[0] > 0:
                if self.fmt in FP4:    # the dispatch quantizes each expert's rows on their own
                    xe = quantize_ste(xe, self.fmt, "rows")
                outs.append(self.experts[e](xe, x_in_format=True) if low else self.experts[e](xe))
        yp = torch.cat(outs, dim=0)
        if self.combine_fmt != "fp32":     # outputs come back rounded (straight-through)
            yp = quantize_ste(yp, self.combine_fmt, "rows")
        y_perm = yp * w_perm[:, None]
        y = xf.new_zeros(N, D).index_add(0, tok, y_perm)
        if self.shared_experts is not None:
            y = y + self.shared_experts(xf)

        # Sequence-wise balance loss: f constant, gradient through P.
        cnt = torch.zeros(B, E, dtype=rdt, device=x.device)
        cnt.scatter_add_(1, chosen.reshape(B, T * K), torch.ones(B, T * K, dtype=rdt, device=x.device))
        f = cnt * (E / (K * T))                                             # [B, E], no grad
        Pm = (s / s.sum(-1, keepdim=True)).view(B, T, E).mean(1)            # [B, E]
        balance = (f * Pm).sum(-1).mean()
        # Router z-loss.
        z = torch.logsumexp(logits, dim=-1).pow(2).mean()

        return y.view(B, T, D), MoEAux(balance, z, load, chosen)


# ------------------------------------------------------------------------------------------
# Decoder blocks
# ------------------------------------------------------------------------------------------
class DecoderLayer(nn.Module):
    """a = h + attn(RMSNorm_in(h)); out = a + ffn(RMSNorm_post(a))."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, dtype: torch.dtype):
        super().__init__()
        self.layer_idx = layer_idx
        D = cfg.hidden_size
        self.input_layernorm = RMSNorm(D, cfg.rms_norm_eps, dtype)
        self.self_attn = MLA(cfg, dtype)
        self.post_attention_layernorm = RMSNorm(D, cfg.rms_norm_eps, dtype)
        self.is_moe = cfg.is_moe_layer(layer_idx)
        if self.is_moe:
            self.mlp = MoE(cfg, dtype)
        else:
            self.mlp = SwiGLU(D, cfg.intermediate_size, dtype)

    def set_format(self, fmt: str, combine_fmt: str, attn_fmt: str = "fp32"):
        """Format of this block's linears (attention projections, MLP / experts) and of core
        attention."""
        self.self_attn.set_format(fmt, attn_fmt)
        if self.is_moe:
            self.mlp.set_format(fmt, combine_fmt)
        else:
            self.mlp.set_format(fmt)

    def forward(self, h, cos, sin):
        """h: [B, T, D] -> (out [B, T, D], MoEAux or None)."""
        a = h + self.self_attn(self.input_layernorm(h), cos, sin)
        if self.is_moe:
            f, aux = self.mlp(self.post_attention_layernorm(a))
        else:
            f, aux = self.mlp(self.post_attention_layernorm(a)), None
        return a + f, aux


class SharedHead(nn.Module):
    """`shared_head`: the MTP module's own final norm (the lm_head itself is shared)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype):
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)


class MTPLayer(DecoderLayer):
    """Multi-token-prediction module: enorm, hnorm, eh_proj [D, 2D], a decoder block and its
    own final norm (shared_head.norm)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, dtype: torch.dtype):
        super().__init__(cfg, layer_idx, dtype)
        D = cfg.hidden_size
        self.enorm = RMSNorm(D, cfg.rms_norm_eps, dtype)
        self.hnorm = RMSNorm(D, cfg.rms_norm_eps, dtype)
        self.eh_proj = _linear(2 * D, D, dtype)
        self.shared_head = SharedHead(cfg, dtype)

    def combine(self, e: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        """h' = concat(RMSNorm_enorm(e), RMSNorm_hnorm(h_prev)) @ eh_proj.T"""
        return self.eh_proj(torch.cat([self.enorm(e), self.hnorm(h_prev)], dim=-1))


class DeepseekV3Body(nn.Module):
    """The HF `model.` prefix: embedding, decoder layers (main then MTP), final norm."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype):
        super().__init__()
        L, Dm = cfg.num_hidden_layers, cfg.num_nextn_predict_layers
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype)
        layers = [DecoderLayer(cfg, i, dtype) for i in range(L)]
        layers += [MTPLayer(cfg, L + k, dtype) for k in range(Dm)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)


@dataclass
class ModelOutput:
    lm_loss: torch.Tensor
    mtp_losses: List[torch.Tensor]                         # one per MTP module k = 1..D
    balance_losses: Dict[int, torch.Tensor]                # per MoE layer index (MTP included)
    z_losses: Dict[int, torch.Tensor]
    loads: Dict[int, torch.Tensor]                         # per MoE layer: [E] assignment counts
    logits: Optional[torch.Tensor] = None                  # [N, V] main-model logits


class DeepseekV3(nn.Module):
    """Main model + MTP modules + losses.  `forward(seq)` with seq [B, T+1] int64.

    precision: the training recipe of docs/precision.md ("fp32", "bf16", "mxfp8",
    "fp8-blockwise", "nvfp4", "mxfp4"); bf16_layers: FP8 and FP4 recipes run the first and the
    last that many decoder layers of the main model in bf16 (the last bf16_layers_end when that
    is >= 0)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32,
                 precision: str = "fp32", bf16_layers: int = 1, bf16_layers_end: int = -1):
        super().__init__()
        self.cfg = cfg
        self.dtype = dtype
        self.model = DeepseekV3Body(cfg, dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = _linear(cfg.hidden_size, cfg.vocab_size, dtype)
        else:
            self.lm_head = None
        self._rope_cache = {}   # (T, device) -> (cos, sin); deliberately not a buffer
        self.set_precision(precision, bf16_layers, bf16_layers_end)

    def set_precision(self, precision: str, bf16_layers: int = 1, bf16_layers_end: int = -1):
        """Formats of every GEMM from the recipe (src/model/recipe.h's kRecipes): decoder
        linears by layer, LM head, eh_proj and core attention bf16 unless fp32; the router
        stays in the model's dtype."""
        L = self.cfg.num_hidden_layers
        self.precision, self.bf16_layers = precision, bf16_layers
        self.bf16_layers_end = bf16_layers if bf16_layers_end < 0 else bf16_layers_end
        self.head_fmt = head_format(precision)
        for i, layer in enumerate(self.model.layers):
            layer.set_format(decoder_format(precision, i, L, bf16_layers, self.bf16_layers_end),
                             combine_format(precision), attention_format(precision))
            if isinstance(layer, MTPLayer):
                layer.eh_proj.fmt = self.head_fmt
        if self.lm_head is not None:
            self.lm_head.fmt = self.head_fmt

    def _lm_head(self, x: torch.Tensor) -> torch.Tensor:
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        if self.head_fmt != "fp32":
            return quantized_linear(x, w, self.head_fmt)
        return F.linear(x, w)

    def _rope(self, T: int, device):
        key = (T, str(device))
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_tables(self.cfg, T, self.dtype, device)
        return self._rope_cache[key]

    def forward(self, seq: torch.Tensor, return_logits: bool = False) -> ModelOutput:
        cfg = self.cfg
        B, T1 = seq.shape
        T = T1 - 1
        L, Dm, V = cfg.num_hidden_layers, cfg.num_nextn_predict_layers, cfg.vocab_size
        if T < 1 or (Dm > 0 and T <= Dm):
            raise ValueError(f"sequence length T={T} too short for MTP depth {Dm}")
        cos, sin = self._rope(T, seq.device)
        inputs, targets = seq[:, :T], seq[:, 1:]

        balance, zl, loads = {}, {}, {}

        def record(layer_idx, aux):
            if aux is not None:
                balance[layer_idx] = aux.balance_loss
                zl[layer_idx] = aux.z_loss
                loads[layer_idx] = aux.load

        # Main model.
        h = self.model.embed_tokens(inputs)                                # [B, T, D]
        for l in range(L):
            h, aux = self.model.layers[l](h, cos, sin)
            record(l, aux)
        logits = self._lm_head(self.model.norm(h)).reshape(B * T, V)
        lm_loss = F.cross_entropy(logits.to(_stat_dtype(logits.dtype)), targets.reshape(-1))

        # MTP modules, in sequence; the blocks run over all T positions.
        mtp_losses = []
        h_prev = h
        pos = torch.arange(T, device=seq.device)
        for k in range(1, Dm + 1):
            layer = self.model.layers[L + k - 1]
            idx = pos + k                                                   # t + k
            tok_k = torch.where(idx <= T, seq[:, idx.clamp(max=T)], torch.zeros_like(seq[:, :T]))
            hp = layer.combine(self.model.embed_tokens(tok_k), h_prev)
            h_k, aux = layer(hp, cos, sin)
            record(L + k - 1, aux)
            nv = T - k                                                      # valid: t <= T-k-1
            lg = self._lm_head(layer.shared_head.norm(h_k[:, :nv])).reshape(B * nv, V)
            tgt = seq[:, k + 1:T + 1].reshape(-1)                           # seq[b][t+k+1]
            mtp_losses.append(F.cross_entropy(lg.to(_stat_dtype(lg.dtype)), tgt))
            h_prev = h_k

        return ModelOutput(lm_loss, mtp_losses, balance, zl, loads,
                           logits if return_logits else None)


# ------------------------------------------------------------------------------------------
# Loss combination
# ------------------------------------------------------------------------------------------
@dataclass
class LossWeights:
    mtp_lambda: float = 0.3
    balance_alpha: float = 1e-4
    z_loss_coef: float = 0.0


def combine_losses(out: ModelOutput, w: LossWeights, num_mtp: int):
    """loss = lm + (λ/D) Σ mtp_k + α Σ balance_l + c_z Σ z_l.

    Returns (loss, parts) where parts holds the unweighted sums mtp/balance/z (zero tensors
    when there is nothing to sum)."""
    zero = out.lm_loss.new_zeros(())
    mtp = sum(out.mtp_losses, zero)
    bal = sum(out.balance_losses.values(), zero)
    z = sum(out.z_losses.values(), zero)
    loss = out.lm_loss
    if num_mtp > 0:
        loss = loss + (w.mtp_lambda / num_mtp) * mtp
    loss = loss + w.balance_alpha * bal + w.z_loss_coef * z
    return loss, {"lm_loss": out.lm_loss, "mtp_loss": mtp, "balance_loss": bal, "z_loss": z}


# ------------------------------------------------------------------------------------------
# Hugging Face names <-> tensors, and initialisation
# ------------------------------------------------------------------------------------------
BIAS_SUFFIX = "mlp.gate.e_score_correction_bias"


def hf_state_dict(model: DeepseekV3) -> Dict[str, torch.Tensor]:
    """name -> tensor (the live tensors) for every parameter and the router biases, under the
    Hugging Face DeepSeek-V3 names.  Module names already are the HF names."""
    sd = {n: p for n, p in model.named_parameters()}
    for n, b in model.named_buffers():
        sd[n] = b
    return sd


def load_hf_state_dict(model: DeepseekV3, tensors: Dict[str, torch.Tensor], strict: bool = True):
    """Copy tensors (any float dtype) into the model by HF name; strict checks names/shapes."""
    sd = hf_state_dict(model)
    missing = [n for n in sd if n not in tensors]
    unexpected = [n for n in tensors if n not in sd]
    if strict and (missing or unexpected):
        raise KeyError(f"state dict mismatch: missing {missing[:5]}..., unexpected {unexpected[:5]}...")
    with torch.no_grad():
        for n, t in tensors.items():
            if n not in sd:
                continue
            if tuple(t.shape) != tuple(sd[n].shape):
                raise ValueError(f"{n}: shape {tuple(t.shape)} != {tuple(sd[n].shape)}")
            sd[n].copy_(t.to(sd[n].dtype))


def trainable_named_parameters(model: DeepseekV3):
    """(name, parameter) pairs that receive gradients (everything but the router biases,
    which are buffers)."""
    return list(model.named_parameters())


def init_parameters(model: DeepseekV3, generator: torch.Generator, round_to_fp32: bool = False):
    """Seeded init in hf_state_dict order: normal(0, initializer_range) for matrices and the
    embedding, ones for norm weights, normal(0, 0.01) for e_score_correction_bias.

    Draws are float64 from `generator`; with round_to_fp32 values are rounded to float32
    first (so a float64 model computes with exactly the values an F32 file stores)."""
    std = model.cfg.initializer_range
    with torch.no_grad():
        for name, t in hf_state_dict(model).items():
            if name.endswith(BIAS_SUFFIX):
                v = torch.empty(t.shape, dtype=torch.float64).normal_(0.0, 0.01, generator=generator)
            elif t.dim() == 1:          # every 1-D parameter is an RMSNorm weight
                v = torch.ones(t.shape, dtype=torch.float64)
            else:
                v = torch.empty(t.shape, dtype=torch.float64).normal_(0.0, std, generator=generator)
            if round_to_fp32:
                v = v.float()
            t.copy_(v.to(t.dtype))
