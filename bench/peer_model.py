"""The DeepSeek-V3-style model of docs/model.md written for speed in PyTorch 2 (the peer of
bench/pytorch_peer.py), not for clarity: reference/model.py is the readable oracle.

Same math as reference/model.py, with the choices a speed-minded PyTorch user makes:
- fused projections: MLA's q_a_proj and kv_a_proj_with_mqa are one [Q+C+R, D] linear; every
  SwiGLU's gate_proj and up_proj are one [2F, D] linear (`w13`);
- attention through F.scaled_dot_product_attention(is_causal=True, scale=...) (v may be
  zero-padded to the q/k head dim so the CPU flash kernel applies, see `MLA.pad_v`);
- MoE: tokens sorted by expert (argsort of the flattened top-k indices), one matmul chain per
  expert on its contiguous slice, one parameter set per expert, experts with no token skipped;
  the data-dependent expert loop is kept out of torch.compile (torch.compiler.disable), the
  rest of the model compiles;
- bf16: the caller runs forward under torch.autocast("cpu", bfloat16); master weights stay
  fp32; norms, router, softmax statistics and losses are fp32.

Parameter names differ from Hugging Face's because of the fusions; `load_hf` / `to_hf`
translate (used by pytorch_peer.py --check against reference/model.py).
"""

from typing import Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from config import ModelConfig          # reference/config.py (plain helper)
from rope import rope_tables, softmax_scale   # reference/rope.py (plain helper)


def _lin(d_in: int, d_out: int) -> nn.Linear:
    return nn.Linear(d_in, d_out, bias=False)


def _low_dtype() -> torch.dtype:
    """The autocast dtype when CPU autocast is on, else None."""
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu")
    return None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # statistics in fp32 whatever the input (the residual stream is fp32 anyway)
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, self.eps)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) with gate and up fused into w13 = [gate; up]."""

    def __init__(self, d: int, width: int):
        super().__init__()
        self.width = width
        self.w13 = _lin(d, 2 * width)
        self.w2 = _lin(width, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u = self.w13(x).split(self.width, dim=-1)
        return self.w2(F.silu(g) * u)


def rope_interleaved(x: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor) -> torch.Tensor:
    """Interleaved-pair rotation; cos2/sin2 are the [T, R/2] tables repeated per pair element
    ([T, R]) and shaped to broadcast against x: x*cos + (-x1, x0)*sin."""
    x0, x1 = x.unflatten(-1, (-1, 2)).unbind(-1)
    rot = torch.stack((-x1, x0), dim=-1).flatten(-2)
    return x * cos2 + rot * sin2


class MLA(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        D, H = cfg.hidden_size, cfg.num_attention_heads
        self.H, self.Q, self.C = H, cfg.q_lora_rank, cfg.kv_lora_rank
        self.P, self.R, self.U = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.scale = softmax_scale(cfg)
        self.pad_v = False   # set by the caller: zero-pad v to P+R for the CPU flash kernel
        self.wa = _lin(D, self.Q + self.C + self.R)      # [q_a_proj; kv_a_proj_with_mqa]
        self.q_norm = RMSNorm(self.Q, cfg.rms_norm_eps)
        self.q_b = _lin(self.Q, H * (self.P + self.R))
        self.kv_norm = RMSNorm(self.C, cfg.rms_norm_eps)
        self.kv_b = _lin(self.C, H * (self.P + self.U))
        self.o = _lin(H * self.U, D)

    def forward(self, x, cos2, sin2):
        B, T, _ = x.shape
        H, P, R, U, Q, C = self.H, self.P, self.R, self.U, self.Q, self.C
        cq, ckv, k_rope = self.wa(x).split([Q, C, R], dim=-1)
        q = self.q_b(self.q_norm(cq)).view(B, T, H, P + R)
        q_nope, q_rope = q.split([P, R], dim=-1)
        kv = self.kv_b(self.kv_norm(ckv)).view(B, T, H, P + U)
        k_nope, v = kv.split([P, U], dim=-1)
        q_rope = rope_interleaved(q_rope, cos2[:, None, :], sin2[:, None, :])
        k_rope = rope_interleaved(k_rope, cos2, sin2)
        dt = q_nope.dtype
        q = torch.cat([q_nope, q_rope.to(dt)], dim=-1).transpose(1, 2)
        k = torch.cat([k_nope, k_rope.to(dt)[:, :, None, :].expand(B, T, H, R)], dim=-1)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        if self.pad_v and U < P + R:
            v = F.pad(v, (0, P + R - U))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        if self.pad_v and U < P + R:
            o = o[..., :U]
        return self.o(o.transpose(1, 2).reshape(B, T, H * U))


@torch.compiler.disable
def _experts_forward(experts: nn.ModuleList, x: torch.Tensor, chosen: torch.Tensor,
                     gate: torch.Tensor) -> torch.Tensor:
    """Σ_k gate[n,k] * expert_{chosen[n,k]}(x[n]) for x [N, D]; sorted dispatch, one matmul
    chain per expert on its contiguous slice (data-dependent: kept out of torch.compile)."""
    N, K = chosen.shape
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=len(experts)).tolist()
    tok = order // K
    lo = _low_dtype()
    xin = x.to(lo) if lo is not None else x          # cast once, not per expert slice
    x_perm = xin.index_select(0, tok)
    outs = []
    for e, xe in enumerate(x_perm.split(counts)):
        if counts[e]:
            outs.append(experts[e](xe))
    y_perm = torch.cat(outs) * gate.reshape(-1).index_select(0, order)[:, None]
    return torch.zeros(N, x.shape[1], dtype=y_perm.dtype).index_add_(0, tok, y_perm)


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        D, E = cfg.hidden_size, cfg.n_routed_experts
        self.router = nn.Parameter(torch.empty(E, D))
        self.register_buffer("bias", torch.zeros(E))   # e_score_correction_bias
        self.experts = nn.ModuleList(SwiGLU(D, cfg.moe_intermediate_size) for _ in range(E))
        self.shared = (SwiGLU(D, cfg.moe_intermediate_size * cfg.n_shared_experts)
                       if cfg.n_shared_experts > 0 else None)

    def route(self, xf: torch.Tensor, B: int, T: int):
        """fp32 router: (chosen [N,K], gates [N,K], balance loss, z-loss, load [E])."""
        cfg = self.cfg
        E, K, G = cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_group
        with torch.autocast("cpu", enabled=False):
            logits = F.linear(xf.float(), self.router)
            s = torch.sigmoid(logits)
            sel = s.detach() + self.bias
            if G > 1:
                gsc = sel.view(-1, G, E // G).topk(min(2, E // G), dim=-1).values.sum(-1)
                keep = gsc.topk(cfg.topk_group, dim=-1).indices
                gmask = torch.zeros_like(gsc, dtype=torch.bool).scatter_(1, keep, True)
                sel = sel.masked_fill(~gmask.repeat_interleave(E // G, dim=1), float("-inf"))
            chosen = sel.topk(K, dim=-1).indices
            w = s.gather(1, chosen)
            if cfg.norm_topk_prob:
                w = w / w.sum(-1, keepdim=True)
            w = w * cfg.routed_scaling_factor
            cnt = torch.zeros(B, E).scatter_add_(
                1, chosen.view(B, T * K), torch.ones(B, T * K))
            f = cnt * (E / (K * T))
            pm = (s / s.sum(-1, keepdim=True)).view(B, T, E).mean(1)
            balance = (f * pm).sum(-1).mean()
            z = torch.logsumexp(logits, dim=-1).square().mean()
        return chosen, w, balance, z, cnt.sum(0)

    def forward(self, x: torch.Tensor):
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        chosen, w, balance, z, load = self.route(xf, B, T)
        y = _experts_forward(self.experts, xf, chosen, w)
        if self.shared is not None:
            y = y + self.shared(xf)
        return y.view(B, T, D), (balance, z, load)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, idx: int):
        super().__init__()
        D = cfg.hidden_size
        self.attn_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.attn = MLA(cfg)
        self.ffn_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.is_moe = cfg.is_moe_layer(idx)
        self.ffn = MoE(cfg) if self.is_moe else SwiGLU(D, cfg.intermediate_size)

    def forward(self, h, cos2, sin2):
        a = h + self.attn(self.attn_norm(h), cos2, sin2)
        if self.is_moe:
            f, aux = self.ffn(self.ffn_norm(a))
        else:
            f, aux = self.ffn(self.ffn_norm(a)), None
        return a + f, aux


class MTPBlock(Block):
    def __init__(self, cfg: ModelConfig, idx: int):
        super().__init__(cfg, idx)
        D = cfg.hidden_size
        self.enorm = RMSNorm(D, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(D, cfg.rms_norm_eps)
        self.eh_proj = _lin(2 * D, D)
        self.head_norm = RMSNorm(D, cfg.rms_norm_eps)


class PeerModel(nn.Module):
    """forward(seq [B, T+1]) -> (loss, parts dict, loads list) with the loss of docs/model.md:
    lm + (mtp_lambda/D) Σ mtp + balance_alpha Σ balance + z_coef Σ z."""

    def __init__(self, cfg: ModelConfig, mtp_lambda=0.3, balance_alpha=1e-4, z_coef=1e-3,
                 autocast_dtype=None):
        super().__init__()
        self.cfg = cfg
        self.mtp_lambda, self.balance_alpha, self.z_coef = mtp_lambda, balance_alpha, z_coef
        self.autocast_dtype = autocast_dtype
        L, Dm = cfg.num_hidden_layers, cfg.num_nextn_predict_layers
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Block(cfg, i) for i in range(L)] +
                                    [MTPBlock(cfg, L + k) for k in range(Dm)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else _lin(cfg.hidden_size, cfg.vocab_size)
        self._rope = {}

    def moe_blocks(self) -> List[MoE]:
        return [b.ffn for b in self.layers if b.is_moe]

    def set_pad_v(self, on: bool):
        for b in self.layers:
            b.attn.pad_v = on

    def rope(self, T: int):
        if T not in self._rope:
            cos, sin = rope_tables(self.cfg, T, torch.float32)
            self._rope[T] = (cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1))
        return self._rope[T]

    def head(self, x):
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w)

    def forward(self, seq: torch.Tensor):
        if self.autocast_dtype is not None:
            with torch.autocast("cpu", dtype=self.autocast_dtype):
                return self._forward(seq)
        return self._forward(seq)

    def _forward(self, seq: torch.Tensor):
        cfg = self.cfg
        B, T1 = seq.shape
        T = T1 - 1
        L, Dm, V = cfg.num_hidden_layers, cfg.num_nextn_predict_layers, cfg.vocab_size
        cos2, sin2 = self.rope(T)
        balances, zs, loads = [], [], []
        h = self.embed(seq[:, :T])
        for l in range(L):
            h, aux = self.layers[l](h, cos2, sin2)
            if aux is not None:
                balances.append(aux[0]); zs.append(aux[1]); loads.append(aux[2])
        logits = self.head(self.norm(h)).view(B * T, V)
        lm = F.cross_entropy(logits.float(), seq[:, 1:].reshape(-1))
        mtps = []
        h_prev = h
        for k in range(1, Dm + 1):
            blk = self.layers[L + k - 1]
            tok = seq[:, k:]                                   # positions t+k <= T
            if k > 1:
                tok = torch.cat([tok, tok.new_zeros(B, k - 1)], dim=1)
            hp = blk.eh_proj(torch.cat([blk.enorm(self.embed(tok)), blk.hnorm(h_prev)], -1))
            h_k, aux = blk(hp, cos2, sin2)
            if aux is not None:
                balances.append(aux[0]); zs.append(aux[1]); loads.append(aux[2])
            nv = T - k
            lg = self.head(blk.head_norm(h_k[:, :nv])).reshape(B * nv, V)
            mtps.append(F.cross_entropy(lg.float(), seq[:, k + 1:].reshape(-1)))
            h_prev = h_k
        zero = lm.new_zeros(())
        mtp = sum(mtps, zero)
        bal = sum(balances, zero)
        z = sum(zs, zero)
        loss = lm + self.balance_alpha * bal + self.z_coef * z
        if Dm > 0:
            loss = loss + (self.mtp_lambda / Dm) * mtp
        return loss, {"lm_loss": lm, "mtp_loss": mtp, "balance_loss": bal, "z_loss": z}, loads

    # ---- Hugging Face names ------------------------------------------------------------
    def _hf_pieces(self):
        """(peer tensor, [hf names]) pairs: each peer tensor is the row-wise concatenation of
        the listed HF tensors."""
        cfg = self.cfg
        out = [(self.embed.weight, ["model.embed_tokens.weight"]),
               (self.norm.weight, ["model.norm.weight"])]
        if self.lm_head is not None:
            out.append((self.lm_head.weight, ["lm_head.weight"]))

        def swiglu(m: SwiGLU, pre: str):
            return [(m.w13.weight, [pre + "gate_proj.weight", pre + "up_proj.weight"]),
                    (m.w2.weight, [pre + "down_proj.weight"])]

        for i, b in enumerate(self.layers):
            p = f"model.layers.{i}."
            a = b.attn
            out += [(b.attn_norm.weight, [p + "input_layernorm.weight"]),
                    (b.ffn_norm.weight, [p + "post_attention_layernorm.weight"]),
                    (a.wa.weight, [p + "self_attn.q_a_proj.weight",
                                   p + "self_attn.kv_a_proj_with_mqa.weight"]),
                    (a.q_norm.weight, [p + "self_attn.q_a_layernorm.weight"]),
                    (a.q_b.weight, [p + "self_attn.q_b_proj.weight"]),
                    (a.kv_norm.weight, [p + "self_attn.kv_a_layernorm.weight"]),
                    (a.kv_b.weight, [p + "self_attn.kv_b_proj.weight"]),
                    (a.o.weight, [p + "self_attn.o_proj.weight"])]
            if b.is_moe:
                out += [(b.ffn.router, [p + "mlp.gate.weight"]),
                        (b.ffn.bias, [p + "mlp.gate.e_score_correction_bias"])]
                for e, ex in enumerate(b.ffn.experts):
                    out += swiglu(ex, p + f"mlp.experts.{e}.")
                if b.ffn.shared is not None:
                    out += swiglu(b.ffn.shared, p + "mlp.shared_experts.")
            else:
                out += swiglu(b.ffn, p + "mlp.")
            if isinstance(b, MTPBlock):
                out += [(b.enorm.weight, [p + "enorm.weight"]),
                        (b.hnorm.weight, [p + "hnorm.weight"]),
                        (b.eh_proj.weight, [p + "eh_proj.weight"]),
                        (b.head_norm.weight, [p + "shared_head.norm.weight"])]
        return out

    @torch.no_grad()
    def load_hf(self, tensors: Dict[str, torch.Tensor]):
        """Copy parameters and router biases from a dict of HF-named tensors."""
        for t, names in self._hf_pieces():
            t.copy_(torch.cat([tensors[n].to(t.dtype) for n in names], dim=0))

    def to_hf(self, grads: bool = False) -> Dict[str, torch.Tensor]:
        """HF-named views of the parameters (or of their gradients, zeros where None)."""
        out = {}
        for t, names in self._hf_pieces():
            src = t
            if grads:
                src = t.grad if t.grad is not None else torch.zeros_like(t)
            if len(names) == 1:
                out[names[0]] = src
            else:
                for n, piece in zip(names, _split_rows(src, names, self)):
                    out[n] = piece
        return out

    @torch.no_grad()
    def init_(self, gen: torch.Generator):
        """normal(0, initializer_range) for matrices and the embedding, ones for norms, zero
        router biases."""
        std = self.cfg.initializer_range
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=gen)
            else:
                p.fill_(1.0)
        for m in self.moe_blocks():
            m.bias.zero_()


def _split_rows(src: torch.Tensor, names, model: PeerModel) -> Tuple[torch.Tensor, ...]:
    """Split a fused tensor back into its HF pieces (w13 -> gate, up; wa -> q_a, kv_a)."""
    cfg = model.cfg
    if names[0].endswith("q_a_proj.weight"):
        return src.split([cfg.q_lora_rank, cfg.kv_lora_rank + cfg.qk_rope_head_dim], dim=0)
    return src.chunk(2, dim=0)
