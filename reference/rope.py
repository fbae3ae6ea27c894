"""Rotary position embedding for MLA: interleaved pairs, optional YaRN (docs/model.md).

All frequency math is done in float64 and the cos/sin tables are cast to the model dtype.
"""

import math

import torch

from config import ModelConfig


def _get_mscale(scale: float, m: float) -> float:
    """get_mscale(s, m) = 0.1*m*ln(s) + 1 for s > 1, else 1."""
    return 0.1 * m * math.log(scale) + 1.0 if scale > 1 else 1.0


def _yarn_active(cfg: ModelConfig) -> bool:
    rs = cfg.rope_scaling or {}
    kind = rs.get("type", rs.get("rope_type"))
    return kind == "yarn"


def rope_parameters(cfg: ModelConfig):
    """Return (inv_freq [R/2] float64, attention_factor) for the rope head dim R."""
    R = cfg.qk_rope_head_dim
    theta = cfg.rope_theta
    i = torch.arange(R // 2, dtype=torch.float64)
    base = 1.0 / theta ** (2.0 * i / R)
    if not _yarn_active(cfg):
        rs = cfg.rope_scaling or {}
        kind = rs.get("type", rs.get("rope_type"))
        if kind not in (None, "default"):
            raise ValueError(f"rope_scaling type '{kind}' is not supported (only yarn)")
        return base, 1.0

    rs = cfg.rope_scaling
    factor = float(rs["factor"])
    beta_fast = float(rs.get("beta_fast") or 32)
    beta_slow = float(rs.get("beta_slow") or 1)
    orig = float(rs["original_max_position_embeddings"])
    mscale = rs.get("mscale")
    mscale_all_dim = rs.get("mscale_all_dim")

    def corr(n):
        return R * math.log(orig / (n * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), R - 1)
    if low == high:
        high += 0.001
    ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)
    extra = 1.0 - ramp
    inv_freq = base / factor * (1.0 - extra) + base * extra

    if mscale and mscale_all_dim:
        attention_factor = _get_mscale(factor, float(mscale)) / _get_mscale(factor, float(mscale_all_dim))
    else:
        attention_factor = _get_mscale(factor, 1.0)
    return inv_freq, attention_factor


def softmax_scale(cfg: ModelConfig) -> float:
    """1/sqrt(P+R), times mscale² (mscale from mscale_all_dim) under YaRN with factor > 1."""
    scale = 1.0 / math.sqrt(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    if _yarn_active(cfg):
        rs = cfg.rope_scaling
        factor = float(rs["factor"])
        m_all = rs.get("mscale_all_dim")
        if factor > 1 and m_all:
            ms = 0.1 * float(m_all) * math.log(factor) + 1.0
            scale *= ms * ms
    return scale


def rope_tables(cfg: ModelConfig, T: int, dtype=torch.float64, device="cpu"):
    """cos, sin tables [T, R/2] for positions 0..T-1, both times the attention factor."""
    inv_freq, att = rope_parameters(cfg)
    t = torch.arange(T, dtype=torch.float64)
    ang = t[:, None] * inv_freq[None, :]
    cos = (ang.cos() * att).to(dtype=dtype, device=device)
    sin = (ang.sin() * att).to(dtype=dtype, device=device)
    return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of the last dim by the table angles.

    x: [..., T, (heads,) R]; cos/sin must broadcast against x[..., R/2] (caller shapes them).
    x'[2i]   = x[2i] cos - x[2i+1] sin
    x'[2i+1] = x[2i+1] cos + x[2i] sin
    """
    xp = x.unflatten(-1, (x.shape[-1] // 2, 2))
    x0, x1 = xp[..., 0], xp[..., 1]
    y0 = x0 * cos - x1 * sin
    y1 = x1 * cos + x0 * sin
    return torch.stack((y0, y1), dim=-1).flatten(-2)
