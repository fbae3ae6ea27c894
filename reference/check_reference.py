#!/usr/bin/env python3
"""Self-check of the PyTorch reference.  Exit status 0 iff every check passes.

usage: check_reference.py [--golden DIR [--config CONFIG]]

With --golden, also re-derives step.safetensors from params.safetensors in float64 and
compares (and checks the three files' names, dtypes and shapes); files written with
make_golden.py --precision P are re-derived in that recipe (read from their metadata).
"""

import argparse
import copy
import math
import os
import struct
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch.nn.utils.stateless import functional_call  # noqa: E402

from config import ModelConfig, load_config, load_config_dict  # noqa: E402
from flops import flops_per_token  # noqa: E402
import quant  # noqa: E402
from model import (DeepseekV3, LossWeights, combine_losses, hf_state_dict,  # noqa: E402
                   init_parameters, load_hf_state_dict, select_experts)
from rope import apply_rope, rope_parameters, rope_tables, softmax_scale  # noqa: E402
from safetensors_io import load_file, save_file  # noqa: E402
from train import (TrainHParams, clip_grad_global_norm, lr_at, make_optimizer,  # noqa: E402
                   update_router_bias)

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def micro_config(**over) -> ModelConfig:
    """A very small float64-friendly config exercising every piece (YaRN, MoE, MTP)."""
    d = {
        "vocab_size": 23, "hidden_size": 16, "intermediate_size": 24,
        "moe_intermediate_size": 8, "num_hidden_layers": 2, "first_k_dense_replace": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 8,
        "kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4,
        "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
        "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 4,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                         "mscale_all_dim": 1.0},
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
        "initializer_range": 0.2,
    }
    d.update(over)
    return ModelConfig.from_hf(d)


def new_model(cfg, seed=0, dtype=torch.float64):
    m = DeepseekV3(cfg, dtype)
    init_parameters(m, torch.Generator().manual_seed(seed))
    return m


# ------------------------------------------------------------------------------------------
@check
def safetensors_roundtrip():
    ts = {"a": torch.randn(3, 4), "b": torch.randn(2, dtype=torch.float64),
          "c": torch.arange(5, dtype=torch.int32), "d": torch.arange(6, dtype=torch.int64).view(2, 3),
          "s": torch.tensor(1.5), "e": torch.zeros(0, 3)}
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "x.safetensors")
        save_file(ts, p, {"k": "v"})
        back = load_file(p)
    assert list(back) == list(ts), "names/order"
    for n in ts:
        assert back[n].dtype == ts[n].dtype and back[n].shape == ts[n].shape, n
        assert torch.equal(back[n], ts[n]), n


@check
def flops_formula():
    cfg = load_config(os.path.join(ROOT, "configs", "deepseek-v3-671b.json"))
    with_mtp = flops_per_token(cfg, 4096, mtp=True) / 1e9
    without = flops_per_token(cfg, 4096, mtp=False) / 1e9
    assert abs(with_mtp - 260.0) <= 0.05, f"with MTP {with_mtp}"
    assert abs(without - 249.8) <= 0.05, f"without MTP {without}"


@check
def yarn_parameters():
    # DeepSeek-V3: R=64, orig 4096, theta 1e4 -> low = floor(10.47) = 10, high = ceil(22.5) = 23
    cfg = load_config(os.path.join(ROOT, "configs", "deepseek-v3-671b.json"))
    inv, att = rope_parameters(cfg)
    base = 1.0 / 10000.0 ** (torch.arange(32, dtype=torch.float64) * 2 / 64)
    assert abs(att - 1.0) < 1e-15, att                   # mscale == mscale_all_dim
    assert torch.allclose(inv[:11], base[:11], rtol=0, atol=0)
    assert torch.allclose(inv[23:], base[23:] / 40, rtol=1e-15)
    ramp = (torch.arange(32, dtype=torch.float64) - 10) / 13
    assert torch.allclose(inv[15], base[15] / 40 * ramp[15] + base[15] * (1 - ramp[15]))
    ms = 0.1 * math.log(40) + 1
    assert abs(softmax_scale(cfg) - ms * ms / math.sqrt(192)) < 1e-15
    # tiny.json: R=8, orig 8 -> low 0, high 1: dim pair 0 keeps base, the rest base/4
    tiny = load_config(os.path.join(ROOT, "configs", "tiny.json"))
    inv, att = rope_parameters(tiny)
    base = 1.0 / 10000.0 ** (torch.arange(4, dtype=torch.float64) * 2 / 8)
    assert inv[0] == base[0] and torch.allclose(inv[1:], base[1:] / 4)
    # attention_factor with mscale != mscale_all_dim, and without mscale_all_dim
    c2 = micro_config(rope_scaling={"type": "yarn", "factor": 4,
                                    "original_max_position_embeddings": 4,
                                    "mscale": 0.707, "mscale_all_dim": 0.0})
    _, att2 = rope_parameters(c2)
    assert abs(att2 - (0.1 * math.log(4) + 1)) < 1e-15
    assert abs(softmax_scale(c2) - 1 / math.sqrt(8)) < 1e-15
    # no rope_scaling: plain RoPE
    small = load_config(os.path.join(ROOT, "configs", "small.json"))
    inv, att = rope_parameters(small)
    assert att == 1.0 and abs(softmax_scale(small) - 1 / math.sqrt(48)) < 1e-15


@check
def rope_is_relative():
    """Interleaved RoPE: q(t)·k(s) depends only on t - s (up to attention_factor²)."""
    cfg = micro_config(qk_rope_head_dim=8, rope_scaling=None)
    cos, sin = rope_tables(cfg, 12)
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(8, dtype=torch.float64, generator=g), torch.randn(8, dtype=torch.float64, generator=g)
    qs = apply_rope(q.expand(12, 8), cos, sin)
    ks = apply_rope(k.expand(12, 8), cos, sin)
    d1 = (qs[7] * ks[4]).sum()
    d2 = (qs[5] * ks[2]).sum()
    assert abs(d1 - d2) < 1e-12, (d1, d2)
    # explicit pair rotation at t=1 for pair 0
    x = torch.tensor([1.0, 2.0] + [0.0] * 6, dtype=torch.float64)
    y = apply_rope(x.expand(12, 8), cos, sin)[1]
    c, s = cos[1, 0], sin[1, 0]
    assert torch.allclose(y[:2], torch.stack([1 * c - 2 * s, 2 * c + 1 * s]))


def naive_select(sel_row, G, topk_group, K):
    """Per-token group-limited top-k, written as plainly as possible."""
    E = len(sel_row)
    gs = E // G
    gscore = []
    for gi in range(G):
        vals = sorted(sel_row[gi * gs:(gi + 1) * gs], reverse=True)
        gscore.append(sum(vals[:2]))
    kept = sorted(range(G), key=lambda gi: (-gscore[gi], gi))[:topk_group]
    cand = [e for e in range(E) if e // gs in kept]
    return sorted(cand, key=lambda e: (-sel_row[e], e))[:K], kept


@check
def group_limited_selection():
    g = torch.Generator().manual_seed(2)
    for (E, G, tg, K) in [(16, 4, 2, 4), (32, 4, 2, 4), (256, 8, 4, 8), (8, 1, 1, 3), (12, 6, 1, 2)]:
        sel = torch.rand(300, E, dtype=torch.float64, generator=g)
        chosen, kept = select_experts(sel, G, tg, K)
        gs = E // G
        for n in range(sel.shape[0]):
            ch = chosen[n].tolist()
            kp = set(kept[n].tolist())
            assert all(e // gs in kp for e in ch), f"expert outside kept groups {ch} {kp}"
            ref_ch, ref_kept = naive_select(sel[n].tolist(), G, tg, K)
            assert ch == ref_ch, (E, G, n, ch, ref_ch)
            assert sorted(kp) == sorted(ref_kept)
    # ties: lower group / lower expert index first
    sel = torch.ones(1, 16, dtype=torch.float64)
    chosen, kept = select_experts(sel, 4, 2, 4)
    assert kept[0].tolist() == [0, 1] and chosen[0].tolist() == [0, 1, 2, 3]
    sel = torch.zeros(1, 16, dtype=torch.float64)
    sel[0, 15] = 5.0    # group 3 has the single best expert, but group 2 ties group 3? no:
    sel[0, 9] = sel[0, 8] = 2.6   # group 2 score 5.2 > group 3 score 5.0
    chosen, kept = select_experts(sel, 4, 1, 2)
    assert kept[0].tolist() == [2] and chosen[0].tolist() == [8, 9], (kept, chosen)


@check
def moe_dispatch_matches_naive():
    cfg = micro_config()
    m = new_model(cfg, seed=3)
    moe = m.model.layers[1].mlp
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, cfg.hidden_size, dtype=torch.float64, generator=g)
    y, aux = moe(x)
    xf = x.reshape(-1, cfg.hidden_size)
    logits = xf @ moe.gate.weight.T
    s = torch.sigmoid(logits)
    sel = s + moe.gate.e_score_correction_bias
    yn = torch.zeros_like(xf)
    counts = torch.zeros(cfg.n_routed_experts, dtype=torch.int64)
    for n in range(xf.shape[0]):
        ch, _ = naive_select(sel[n].tolist(), cfg.n_group, cfg.topk_group, cfg.num_experts_per_tok)
        w = torch.stack([s[n, e] for e in ch])
        w = w / w.sum() * cfg.routed_scaling_factor
        for wk, e in zip(w, ch):
            yn[n] += wk * moe.experts[e](xf[n:n + 1])[0]
            counts[e] += 1
        yn[n] += moe.shared_experts(xf[n:n + 1])[0]
    assert torch.allclose(y.reshape(-1, cfg.hidden_size), yn, rtol=1e-12, atol=1e-13)
    assert torch.equal(aux.load, counts)
    # balance loss by its definition, per sequence
    E, K, T = cfg.n_routed_experts, cfg.num_experts_per_tok, 5
    Lb = []
    for b in range(2):
        rows = range(b * T, (b + 1) * T)
        f = torch.zeros(E, dtype=torch.float64)
        for n in rows:
            for e in aux.chosen[n].tolist():
                f[e] += E / (K * T)
        P = sum(s[n] / s[n].sum() for n in rows) / T
        Lb.append((f * P).sum())
    assert abs(aux.balance_loss - sum(Lb) / 2) < 1e-12
    z = sum(torch.logsumexp(logits[n], 0) ** 2 for n in range(10)) / 10
    assert abs(aux.z_loss - z) < 1e-12


@check
def bias_selects_but_gets_no_gradient():
    cfg = micro_config()
    m = new_model(cfg, seed=5)
    moe = m.model.layers[1].mlp
    x = torch.randn(1, 6, cfg.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    _, a1 = moe(x)
    with torch.no_grad():
        moe.gate.e_score_correction_bias[3] += 100.0     # expert 3 now always chosen
    y, a2 = moe(x)
    assert (a2.chosen[:, 0] == 3).all(), a2.chosen
    assert not moe.gate.e_score_correction_bias.requires_grad
    names = [n for n, _ in m.named_parameters()]
    assert not any("e_score_correction_bias" in n for n in names)
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in hf_state_dict(m)


@check
def hf_names():
    cfg = load_config(os.path.join(ROOT, "configs", "tiny.json"))
    m = DeepseekV3(cfg, torch.float32)
    names = set(hf_state_dict(m))
    L = cfg.num_hidden_layers
    expect = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
              "model.layers.0.mlp.gate_proj.weight",
              "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
              "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
              "model.layers.1.mlp.experts.15.down_proj.weight",
              "model.layers.2.mlp.shared_experts.up_proj.weight",
              f"model.layers.{L}.enorm.weight", f"model.layers.{L}.hnorm.weight",
              f"model.layers.{L}.eh_proj.weight", f"model.layers.{L}.shared_head.norm.weight",
              f"model.layers.{L}.self_attn.q_a_layernorm.weight",
              f"model.layers.{L}.mlp.experts.0.gate_proj.weight"}
    assert expect <= names, expect - names
    assert not any("experts.16" in n for n in names)
    assert m.model.layers[L].eh_proj.weight.shape == (cfg.hidden_size, 2 * cfg.hidden_size)
    # tied embeddings: no lm_head
    raw = load_config_dict(os.path.join(ROOT, "configs", "tiny.json"))
    raw["tie_word_embeddings"] = True
    mt = DeepseekV3(ModelConfig.from_hf(raw), torch.float32)
    assert "lm_head.weight" not in hf_state_dict(mt)
    # round trip through the name mapping
    m2 = DeepseekV3(cfg, torch.float32)
    init_parameters(m, torch.Generator().manual_seed(0))
    load_hf_state_dict(m2, {n: t.detach().double() for n, t in hf_state_dict(m).items()})
    for n, t in hf_state_dict(m).items():
        assert torch.equal(t, hf_state_dict(m2)[n]), n


@check
def init_loss_is_ln_vocab():
    cfg = load_config(os.path.join(ROOT, "configs", "tiny.json"))
    m = new_model(cfg, seed=1234)
    g = torch.Generator().manual_seed(7)
    seq = torch.randint(0, cfg.vocab_size, (2, 17), generator=g)
    out = m(seq)
    loss, parts = combine_losses(out, LossWeights(0.3, 0.01, 0.001), cfg.num_nextn_predict_layers)
    lnv = math.log(cfg.vocab_size)
    print(f"    tiny init: lm_loss {parts['lm_loss'].item():.6f} mtp {parts['mtp_loss'].item():.6f} "
          f"ln(V) {lnv:.6f}")
    for k, v in parts.items():
        assert torch.isfinite(v), k
    assert abs(parts["lm_loss"].item() - lnv) < 0.1
    assert abs(parts["mtp_loss"].item() - lnv) < 0.1
    # balance loss ~ 1 per MoE layer at a near-uniform router
    nmoe = len(cfg.moe_layers())
    assert abs(parts["balance_loss"].item() / nmoe - 1.0) < 0.5


@check
def causal():
    """Changing input token j changes no main logits before j, and no MTP loss term whose
    window ends before it."""
    cfg = micro_config()
    m = new_model(cfg, seed=8)
    g = torch.Generator().manual_seed(9)
    seq = torch.randint(0, cfg.vocab_size, (1, 9), generator=g)
    seq2 = seq.clone()
    seq2[0, 5] = (seq[0, 5] + 1) % cfg.vocab_size
    a = m(seq, return_logits=True).logits
    b = m(seq2, return_logits=True).logits
    assert torch.allclose(a[:5], b[:5], rtol=0, atol=1e-14)
    assert not torch.allclose(a[5], b[5])


def gradcheck_params(cfg, names, seed, weights=LossWeights(0.3, 0.05, 0.01)):
    m = new_model(cfg, seed=seed)
    seq = torch.randint(0, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(seed + 1))
    params = dict(m.named_parameters())
    inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)

    def f(*ts):
        out = functional_call(m, dict(zip(names, ts)), (seq,))
        return combine_losses(out, weights, cfg.num_nextn_predict_layers)[0]

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@check
def gradcheck_router_gate_path():
    cfg = micro_config()
    gradcheck_params(cfg, ["model.layers.1.mlp.gate.weight",
                           "model.layers.1.mlp.experts.3.up_proj.weight",
                           "model.layers.1.mlp.shared_experts.down_proj.weight",
                           "model.layers.1.post_attention_layernorm.weight"], seed=10)


@check
def gradcheck_mla():
    cfg = micro_config()
    gradcheck_params(cfg, ["model.layers.0.self_attn.q_b_proj.weight",
                           "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
                           "model.layers.0.self_attn.kv_a_layernorm.weight",
                           "model.layers.1.self_attn.q_a_layernorm.weight",
                           "model.layers.1.self_attn.o_proj.weight"], seed=11)


@check
def gradcheck_mtp_and_embeddings():
    cfg = micro_config()
    gradcheck_params(cfg, ["model.layers.2.eh_proj.weight", "model.layers.2.enorm.weight",
                           "model.layers.2.hnorm.weight", "model.layers.2.shared_head.norm.weight",
                           "model.layers.2.mlp.gate.weight", "model.embed_tokens.weight",
                           "model.norm.weight"], seed=12)
    # tied embeddings, dense MTP block (last main layer dense)
    cfg2 = micro_config(tie_word_embeddings=True, first_k_dense_replace=2)
    gradcheck_params(cfg2, ["model.embed_tokens.weight", "model.layers.2.eh_proj.weight",
                            "model.layers.2.mlp.up_proj.weight"], seed=13)


# The model variants of tests/variants/ (tiny.json with one feature changed; moet's
# test_golden_variants compares against their golden files), as changes to micro_config.
VARIANTS = {
    "tied_embeddings": dict(tie_word_embeddings=True),
    "mtp_depth2": dict(num_nextn_predict_layers=2),
    "no_mtp": dict(num_nextn_predict_layers=0),
    "no_shared_expert": dict(n_shared_experts=0),
    "all_dense": dict(first_k_dense_replace=2),          # the MTP block is dense too
    "no_yarn": dict(rope_scaling=None),
    "ungrouped_routing": dict(n_group=1, topk_group=1, norm_topk_prob=False),
}


@check
def gradcheck_variants():
    """Every parameter tensor of the micro config, in each variant: autograd's gradient against
    float64 central differences at the tensor's largest-gradient element and along a random
    direction over all of its elements (a full gradcheck of every element costs minutes)."""
    names = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "tests", "variants"))
                   if f.endswith(".json"))
    assert names == sorted(VARIANTS), f"tests/variants/ {names} != VARIANTS {sorted(VARIANTS)}"
    weights, eps, worst = LossWeights(0.3, 0.05, 0.01), 1e-6, 0.0
    for v, over in VARIANTS.items():
        cfg = micro_config(**over)
        m = new_model(cfg, seed=20)
        seq = torch.randint(0, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(21))

        def loss():
            return combine_losses(m(seq), weights, cfg.num_nextn_predict_layers)[0]

        loss().backward()
        gen = torch.Generator().manual_seed(22)
        checked = 0
        for n, p in m.named_parameters():
            g = (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            u = torch.randn(p.numel(), generator=gen, dtype=torch.float64)
            u /= u.norm()
            top = torch.zeros_like(u)
            top[g.abs().argmax()] = 1.0
            for d in (top, u):
                want = float(g @ d)
                with torch.no_grad():
                    p.add_(eps * d.view_as(p))
                    up = loss().item()
                    p.sub_(2 * eps * d.view_as(p))
                    down = loss().item()
                    p.add_(eps * d.view_as(p))
                fd = (up - down) / (2 * eps)
                bound = 1e-7 + 1e-5 * abs(want)         # gradcheck's atol and rtol
                assert abs(fd - want) <= bound, f"{v}: {n}: autograd {want} vs {fd}"
                worst = max(worst, abs(fd - want) / bound)
            checked += 1
        assert checked == len(list(m.parameters())) and checked > 10, v
        if v == "tied_embeddings":
            assert "lm_head.weight" not in dict(m.named_parameters())
    print(f"    {len(VARIANTS)} variants, every parameter tensor: worst error {worst:.2f} of the bound "
          "(1e-7 + 1e-5 |gradient|)")


@check
def optimizer_schedule_clip_bias():
    hp = TrainHParams(lr=0.01, min_lr_ratio=0.1, warmup=3, steps=10)
    assert abs(lr_at(0, hp) - 0.01 / 3) < 1e-15 and abs(lr_at(2, hp) - 0.01) < 1e-15
    assert abs(lr_at(3, hp) - 0.01) < 1e-15
    assert abs(lr_at(9, hp) - (0.001 + 0.009 * (1 + math.cos(math.pi * 6 / 7)) / 2)) < 1e-15
    assert lr_at(5, TrainHParams(lr=0.01, warmup=3, steps=10, schedule="constant")) == 0.01
    # AdamW against the docs' formula, two steps, decayed and undecayed parameters
    cfg = micro_config()
    m = new_model(cfg, seed=14)
    hp = TrainHParams(lr=0.01, warmup=0, steps=2, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8)
    opt = make_optimizer(m, hp, foreach=False)
    ref = {n: p.detach().clone() for n, p in m.named_parameters()}
    mom = {n: torch.zeros_like(p) for n, p in ref.items()}
    vel = {n: torch.zeros_like(p) for n, p in ref.items()}
    g = torch.Generator().manual_seed(15)
    for t in (1, 2):
        for n, p in m.named_parameters():
            p.grad = torch.randn(p.shape, dtype=p.dtype, generator=g)
            gr = p.grad.clone()
            wd = 0.1 if p.dim() >= 2 else 0.0
            ref[n] -= 0.01 * wd * ref[n]
            mom[n] = 0.9 * mom[n] + 0.1 * gr
            vel[n] = 0.95 * vel[n] + 0.05 * gr * gr
            ref[n] -= 0.01 * (mom[n] / (1 - 0.9 ** t)) / ((vel[n] / (1 - 0.95 ** t)).sqrt() + 1e-8)
        opt.step()
    for n, p in m.named_parameters():
        assert torch.allclose(p, ref[n], rtol=1e-12, atol=1e-14), n
    # clipping
    ps = [torch.zeros(3, requires_grad=True), torch.zeros(4, requires_grad=True)]
    ps[0].grad = torch.tensor([3.0, 0.0, 0.0])
    ps[1].grad = torch.tensor([0.0, 4.0, 0.0, 0.0])
    norm = clip_grad_global_norm(ps, 1.0)
    assert abs(norm - 5.0) < 1e-6
    assert abs(ps[1].grad[1].item() - 4.0 / (5.0 + 1e-6)) < 1e-6
    ps[0].grad = torch.tensor([0.3, 0.0, 0.0])
    ps[1].grad = torch.tensor([0.0, 0.4, 0.0, 0.0])
    clip_grad_global_norm(ps, 1.0)
    assert ps[1].grad[1].item() == torch.tensor(0.4).item()   # coef = min(1, ...) = 1
    # aux-loss-free bias update
    b0 = m.model.layers[1].mlp.gate.e_score_correction_bias.clone()
    load = torch.tensor([4, 2, 2, 0, 1, 3, 2, 2])          # mean 2
    update_router_bias(m, {1: load}, 0.001)
    delta = m.model.layers[1].mlp.gate.e_score_correction_bias - b0
    want = torch.tensor([-1, 0, 0, 1, 1, -1, 0, 0], dtype=torch.float64) * 0.001
    assert torch.allclose(delta, want, atol=1e-15)


# ------------------------------------------------------------------------------------------
# Low-precision recipes (quant.py, docs/precision.md)
# ------------------------------------------------------------------------------------------
E4M3_TABLE = torch.tensor([quant.e4m3_decode(c) for c in range(127)], dtype=torch.float64)


def _f32(v: float) -> float:
    """v rounded to the nearest float32 (Python float in, Python float out)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def e4m3_nearest(vals: torch.Tensor) -> torch.Tensor:
    """Brute force over the 127 non-negative finite E4M3 values (float64): the nearest one,
    ties to the even code (mantissa LSB 0), beyond 448 and Inf -> 448, sign kept, NaN kept."""
    v = vals.to(torch.float64)
    a = v.abs()
    d = (a[:, None] - E4M3_TABLE[None, :]).abs()
    cand = d == d.min(1, keepdim=True).values
    even = (torch.arange(127) % 2 == 0)[None, :]
    ce = cand & even
    pick = torch.where(ce.any(1), ce.to(torch.int64).argmax(1), cand.to(torch.int64).argmax(1))
    r = E4M3_TABLE[pick]
    r = torch.where(torch.isinf(a), torch.full_like(r, 448.0), r)
    r = torch.copysign(r, v)
    return torch.where(torch.isnan(v), v, r)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (signed zeros by sign bit), NaN where the other is NaN."""
    a, b = a.to(torch.float64), b.to(torch.float64)
    na, nb = torch.isnan(a), torch.isnan(b)
    ok = (a == b) & (torch.signbit(a) == torch.signbit(b))
    return bool(torch.equal(na, nb) and (ok | (na & nb)).all())


@check
def e4m3_rounding_exhaustive():
    codes = torch.tensor([quant.e4m3_decode(c) for c in range(256)], dtype=torch.float32)
    assert _same(quant.e4m3_round(codes), codes), "code values do not round-trip"
    pos = E4M3_TABLE.to(torch.float32)
    mid = ((pos[:-1].double() + pos[1:].double()) / 2).float()      # exact in fp32
    assert torch.equal(mid.double(), (pos[:-1].double() + pos[1:].double()) / 2)
    inf32 = torch.tensor(float("inf"))
    probe = torch.cat([mid, torch.nextafter(mid, inf32 * 0), torch.nextafter(mid, inf32),
                       torch.rand(20000, generator=torch.Generator().manual_seed(20)) * 470])
    probe = torch.cat([probe, -probe])
    assert _same(quant.e4m3_round(probe), e4m3_nearest(probe)), "E4M3 rounding / ties"
    # ties by hand: to the even code
    cases = {2.0**-10: 0.0, 3 * 2.0**-10: 2.0**-8, 1.0625: 1.0, 1.1875: 1.25, 17 / 16 * 2.0**-6: 2.0**-6,
             232.0: 224.0, 432.0: 448.0, 15 * 2.0**-10: 2.0**-6,
             # saturation (satfinite): beyond 448, the 448/480 tie and infinities
             448.0: 448.0, 449.0: 448.0, 464.0: 448.0, 470.0: 448.0, 1e30: 448.0, 3e38: 448.0,
             float("inf"): 448.0, 1e-30: 0.0}
    x = torch.tensor(list(cases), dtype=torch.float32)
    want = torch.tensor(list(cases.values()), dtype=torch.float32)
    assert _same(quant.e4m3_round(x), want), quant.e4m3_round(x)
    assert _same(quant.e4m3_round(-x), -want)
    sp = torch.tensor([float("nan"), -0.0, 0.0])
    assert _same(quant.e4m3_round(sp), sp)


@check
def bf16_rounding():
    g = torch.Generator().manual_seed(21)
    x = torch.randn(50000, generator=g) * torch.exp(torch.randn(50000, generator=g) * 20)
    u = torch.randint(0, 2**16, (50000,), generator=g, dtype=torch.int64) << 16
    low = torch.tensor([0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF])[torch.randint(0, 5, (50000,), generator=g)]
    ties = quant.f32_from_bits(u | low)
    ties = ties[~torch.isnan(ties)]
    for t in (x, ties, torch.tensor([3.3961e38, 3.4e38, -3.4e38, 1e-40, -0.0, float("inf")])):
        assert _same(quant.bf16_round(t), t.to(torch.bfloat16).to(torch.float32)), "bf16 RNE"
    one = torch.tensor([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20])
    assert torch.equal(quant.bf16_round(one), torch.tensor([1.0, 1 + 2.0**-6, 1 + 2.0**-7]))
    assert torch.isnan(quant.bf16_round(torch.tensor([float("nan")]))).all()


def _mx_e_by_hand(amax: float) -> int:
    """TE's float_to_e8m0(fp32(amax * fp32(1/448))) with Python floats."""
    v = _f32(amax * _f32(1 / 448))
    if math.isnan(v):
        return 255
    if math.isinf(v):
        return 254
    if v == 0 or v <= 2.0**-127:
        return 0
    if v < 2.0**-126:
        return 1
    m, ex = math.frexp(v)               # v = m 2^ex, m in [0.5, 1)
    e = ex - 1 + 127 + (m != 0.5)       # rounded up unless a power of two
    return min(e, 254)


@check
def mxfp8_scale_rules():
    assert quant._RCP448.item() == _f32(1 / 448)
    g = torch.Generator().manual_seed(22)
    for k in list(range(-140, -110)) + list(range(-30, 30)) + list(range(110, 119)):
        a0 = _f32(448.0 * 2.0**k)
        t0 = torch.tensor(a0, dtype=torch.float32)
        for amax in (torch.nextafter(t0, t0 * 0).item(), a0, torch.nextafter(t0, t0 * 4).item()):
            if amax == 0 or math.isinf(amax):
                continue
            blk = torch.rand(1, 32, generator=g) * 2 - 1
            blk = (blk * amax).to(torch.float32)
            blk[0, 5] = -amax if k % 2 else amax
            v, e, mult, deq = quant.quantize_blocks(blk, "mxfp8", "rows")
            eh = _mx_e_by_hand(amax)
            assert e.item() == eh, (k, amax, e.item(), eh)
            if eh not in (0, 254, 255):     # value = nearest E4M3 of x 2^(127-e), times 2^(e-127)
                sc = 2.0 ** (eh - 127)
                want = e4m3_nearest(blk[0].double() / sc) * sc
                assert _same(v[0], want.float()), (k, amax)
                assert (v[0].abs() <= 448 * sc).all()
    # zero / special blocks
    z = torch.zeros(1, 32)
    v, e, mult, deq = quant.quantize_blocks(z, "mxfp8", "rows")
    assert e.item() == 0 and mult.item() == 1.0 and deq.item() == 2.0**-127 and _same(v, z)
    nan = torch.full((1, 32), float("nan"))
    v, e, _, _ = quant.quantize_blocks(nan, "mxfp8", "rows")
    assert e.item() == 0 and torch.isnan(v).all()                  # amax ignores NaN
    x = torch.tensor([[float("nan"), 3.0, -2.0] + [0.0] * 29])
    v, e, _, _ = quant.quantize_blocks(x, "mxfp8", "rows")
    assert e.item() == _mx_e_by_hand(3.0) and torch.isnan(v[0, 0]) and v[0, 1] == 3.0 and v[0, 2] == -2.0
    inf = torch.tensor([[float("inf")] + [1.0] * 31])
    _, e, mult, _ = quant.quantize_blocks(inf, "mxfp8", "rows")
    assert e.item() == 254 and mult.item() == 0.0
    try:
        quant.quantize(torch.ones(64, 64), "mxfp8", "square")
        raise AssertionError("square MXFP8 blocks must be refused")
    except ValueError:
        pass


@check
def blockwise_scale_rules():
    g = torch.Generator().manual_seed(23)
    for k in list(range(-120, -100)) + list(range(-30, 30)) + list(range(100, 120)):
        a0 = _f32(448.0 * 2.0**k)
        t0 = torch.tensor(a0, dtype=torch.float32)
        for amax in (torch.nextafter(t0, t0 * 0).item(), a0, torch.nextafter(t0, t0 * 4).item()):
            if amax == 0 or math.isinf(amax):
                continue
            blk = ((torch.rand(1, 128, generator=g) * 2 - 1) * amax).to(torch.float32)
            blk[0, 77] = amax
            v, stored, mult, deq = quant.quantize_blocks(blk, "fp8-blockwise", "rows")
            q = _f32(448.0 / amax)
            q = 3.4028234663852886e38 if math.isinf(q) else q
            s = 2.0 ** (math.frexp(q)[1] - 1)      # rounded down to a power of two
            assert mult.item() == s and deq.item() == _f32(1 / s) and stored.item() == deq.item(), (k, amax)
            want = e4m3_nearest(blk[0].double() * s) / s
            assert _same(v[0], want.float()), (k, amax)
    for amax, s in ((0.0, 1.0), (float("inf"), 1.0), (float("nan"), 1.0), (1e-38, 2.0**127)):
        _, _, mult, _ = quant.quantize_blocks(torch.full((1, 128), amax), "fp8-blockwise", "rows")
        assert mult.item() == s, (amax, mult.item())


@check
def partial_blocks_are_zero_padding():
    g = torch.Generator().manual_seed(24)
    for fmt, axes in (("mxfp8", ("rows", "cols")), ("fp8-blockwise", ("rows", "cols", "square"))):
        b = quant.BLOCK[fmt]
        for R, C in ((70, 150), (1, 33), (129, 1), (33, 1), (3, 257), (200, 300), (5, 5)):
            x = (torch.randn(R, C, generator=g) * torch.exp(torch.randn(R, C, generator=g) * 3)).float()
            x[0, 0] = float("nan") if R * C > 4 else x[0, 0]
            Rp, Cp = -(-R // b) * b, -(-C // b) * b
            pad = torch.zeros(Rp, Cp)
            pad[:R, :C] = x
            for ax in axes:
                assert _same(quant.quantize(x, fmt, ax), quant.quantize(pad, fmt, ax)[:R, :C]), (fmt, R, C, ax)
            # column blocks are row blocks of the transpose
            assert _same(quant.quantize(x, fmt, "cols"), quant.quantize(x.t().contiguous(), fmt, "rows").t())
            if fmt == "fp8-blockwise":   # a square block by hand: one scale from its amax
                blk = pad[:b, :b]
                s = quant.fp8block_scale(torch.nan_to_num(blk.abs(), nan=0.0).amax().reshape(1))[1]
                want = quant.e4m3_round(blk * s) * (1 / s)
                assert _same(quant.quantize(x, fmt, "square")[:min(R, b), :min(C, b)],
                             want[:min(R, b), :min(C, b)])
            # idempotent: quantizing quantized values changes nothing
            for ax in axes:
                q = quant.quantize(x, fmt, ax)
                assert _same(quant.quantize(q, fmt, ax), q), (fmt, ax)


def _hand_operands(fmt):
    """Each GEMM's operands built independently of QuantizedLinear: row blocks only, column
    and weight-dgrad blocks through transposes, square blocks tile by tile."""
    def rows(t):
        return quant.quantize(t.float().contiguous(), fmt, "rows").double()

    def cols(t):
        return rows(t.t()).t()

    def weight(t, dgrad):
        if fmt == "fp8-blockwise":
            O, D = t.shape
            out = torch.empty(O, D, dtype=torch.float64)
            for i in range(0, O, 128):
                for j in range(0, D, 128):
                    blk = t[i:i + 128, j:j + 128].float()
                    s = quant.fp8block_scale(blk.abs().amax().reshape(1))[1]
                    out[i:i + 128, j:j + 128] = (quant.e4m3_round(blk * s) * (1 / s)).double()
            return out
        return cols(t) if dgrad else rows(t)
    return rows, cols, weight


@check
def quantized_linear_gemm_operands():
    """fprop, dgrad, wgrad of QuantizedLinear are the products of the spec's operands."""
    g = torch.Generator().manual_seed(25)
    for fmt in ("bf16", "mxfp8", "fp8-blockwise"):
        for (N, D, O) in ((40, 70, 45), (130, 200, 140), (7, 32, 256)):
            # A wide dynamic range inside each block (elements 2^±12 apart): with power-of-two
            # scales E4M3 is scale invariant above its subnormals, so only such data tells
            # one block layout from another.
            def wide(*shape):
                return (torch.randn(*shape, dtype=torch.float64, generator=g)
                        * torch.exp2(torch.rand(*shape, dtype=torch.float64, generator=g) * 24 - 12))
            x = wide(N, D).requires_grad_(True)
            w = (wide(O, D) * 0.05).requires_grad_(True)
            dy = wide(N, O) * 1e-3
            y = quant.quantized_linear(x.view(N // N, N, D), w, fmt).view(N, O)
            y.backward(dy)
            rows, cols, weight = _hand_operands(fmt)
            tol = dict(rtol=1e-12, atol=1e-14)
            assert torch.allclose(y, rows(x) @ weight(w, False).t(), **tol), (fmt, "fprop")
            assert torch.allclose(x.grad, rows(dy) @ weight(w, True), **tol), (fmt, "dgrad")
            assert torch.allclose(w.grad, cols(dy).t() @ cols(x), **tol), (fmt, "wgrad")
            # the recipe really quantizes (not a plain product)
            assert not torch.allclose(w.grad, dy.t() @ x, rtol=1e-6)
            # x already in format: fprop uses x as it is, wgrad blocks it along tokens
            x2 = x.detach().clone().requires_grad_(True)
            y2 = quant.quantized_linear(x2, w, fmt, x_in_format=True)
            assert torch.allclose(y2, x2 @ weight(w, False).t(), **tol)


@check
def grouped_wgrad_blocks_start_at_each_segment():
    """Experts' wgrad: b x 1 blocks along tokens restart at each expert's first row."""
    g = torch.Generator().manual_seed(30)
    counts = [5, 0, 37, 1, 70]
    M, D, O = sum(counts), 48, 40
    x = (torch.randn(M, D, dtype=torch.float64, generator=g)
         * torch.exp2(torch.rand(M, D, dtype=torch.float64, generator=g) * 24 - 12))
    ws = [torch.randn(O, D, dtype=torch.float64, generator=g).requires_grad_(True) for _ in counts]
    dy = torch.randn(M, O, dtype=torch.float64, generator=g)
    for fmt in ("mxfp8", "fp8-blockwise"):
        for w in ws:
            w.grad = None
        quant.grouped_quantized_linear(x, counts, ws, fmt).backward(dy)
        r0 = 0
        for n, w in zip(counts, ws):
            xs, ds = x[r0:r0 + n], dy[r0:r0 + n]
            want = (quant.qop(ds, fmt, "cols").t() @ quant.qop(xs, fmt, "cols") if n
                    else torch.zeros(O, D, dtype=torch.float64))
            got = w.grad if w.grad is not None else torch.zeros(O, D, dtype=torch.float64)
            assert torch.allclose(got, want, rtol=1e-12, atol=1e-14), (fmt, n)
            r0 += n
        # blocks from row 0 of the whole tensor would give other operands
        whole = quant.qop(x, fmt, "cols")
        assert not torch.equal(whole[5:42], quant.qop(x[5:42], fmt, "cols"))


@check
def quantized_linear_plumbing_gradcheck():
    """With identity quantizers (format fp32 through the Function) the custom backward is the
    exact derivative: the transposes, reshapes and operand roles are right."""
    g = torch.Generator().manual_seed(26)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: quant.QuantizedLinear.apply(a, b, "fp32", False),
                                    (x, w))
    xs = x.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: quant.quantize_ste(a, "fp32") * 1.0, (xs,))
    # straight-through quantizer: identity gradient whatever the format
    for fmt in ("bf16", "mxfp8", "fp8-blockwise"):
        xq = torch.randn(3, 40, dtype=torch.float64, generator=g, requires_grad=True)
        gq = torch.randn(3, 40, dtype=torch.float64, generator=g)
        quant.quantize_ste(xq, fmt).backward(gq)
        assert torch.equal(xq.grad, gq)


def _ste_linear_bf16(x, w, fmt, x_in_format=False):
    """bf16 linear from plain autograd pieces: straight-through rounding of x and W
    (x + (round(x) - x).detach()) and a hook rounding the output gradient, so
    dx = bf16(dy)·bf16(W) and dW = bf16(dy)ᵀ·bf16(x)."""
    assert fmt == "bf16"

    def ste(t):
        return t + (quant.qop(t.detach(), "bf16") - t).detach()
    y = torch.nn.functional.linear(x if x_in_format else ste(x), ste(w))
    if y.requires_grad:
        y.register_hook(lambda gy: quant.qop(gy, "bf16"))
    return y


@check
def bf16_model_gradients_are_straight_through():
    """The bf16 recipe's gradients (QuantizedLinear) equal those of the same model built from
    plain autograd pieces with straight-through rounding; the fp32 recipe is the default."""
    import model as model_mod
    cfg = micro_config()
    seq = torch.randint(0, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(27))
    w8 = LossWeights(0.3, 0.05, 0.01)

    def grads(precision, patch=None):
        m = new_model(cfg, seed=27)
        m.set_precision(precision)
        saved = model_mod.quantized_linear
        if patch:
            model_mod.quantized_linear = patch
        try:
            out = m(seq, return_logits=True)
            loss = combine_losses(out, w8, cfg.num_nextn_predict_layers)[0]
            loss.backward()
        finally:
            model_mod.quantized_linear = saved
        return loss, out.logits, {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    l1, lg1, g1 = grads("bf16")
    l2, lg2, g2 = grads("bf16", _ste_linear_bf16)
    assert abs(l1.item() - l2.item()) < 1e-13 and torch.allclose(lg1, lg2, rtol=1e-12, atol=1e-14)
    assert g1.keys() == g2.keys()
    for n in g1:
        assert torch.allclose(g1[n], g2[n], rtol=1e-10, atol=1e-15), n
    # fp32 recipe is the default path, and bf16 differs from it
    l0, lg0, g0 = grads("fp32")
    m = new_model(cfg, seed=27)
    out = m(seq, return_logits=True)
    assert torch.equal(out.logits, lg0)
    assert not torch.allclose(lg0, lg1, rtol=1e-9)


@check
def precision_policy():
    cfg = load_config(os.path.join(ROOT, "configs", "tiny.json"))
    L = cfg.num_hidden_layers
    want = {("fp32", 1): ["fp32"] * 4, ("bf16", 1): ["bf16"] * 4,
            ("mxfp8", 1): ["bf16", "mxfp8", "bf16", "mxfp8"],
            ("fp8-blockwise", 0): ["fp8-blockwise"] * 4,
            ("mxfp8", 2): ["bf16", "bf16", "bf16", "mxfp8"],
            ("nvfp4", 1): ["bf16", "nvfp4", "bf16", "nvfp4"],
            ("mxfp4", 0): ["mxfp4"] * 4,
            ("nvfp4", 1, 0): ["bf16", "nvfp4", "nvfp4", "nvfp4"],
            ("mxfp4", 0, 2): ["mxfp4", "bf16", "bf16", "mxfp4"]}
    for key, fmts in want.items():
        p, n, end = (*key, -1) if len(key) == 2 else key
        m = DeepseekV3(cfg, torch.float64, precision=p, bf16_layers=n, bf16_layers_end=end)
        got = [layer.self_attn.q_a_proj.fmt for layer in m.model.layers]
        assert got == fmts, (p, n, got)
        for layer, f in zip(m.model.layers, fmts):
            mlp = layer.mlp
            if layer.is_moe:
                assert mlp.fmt == f and mlp.experts[3].down_proj.fmt == f and mlp.shared_experts.fmt == f
                assert quant.dispatch_format(f) == ("bf16" if f in ("nvfp4", "mxfp4") else f)
                assert mlp.combine_fmt == ("fp32" if p == "fp32" else "bf16")
            else:
                assert mlp.fmt == f and mlp.up_proj.fmt == f
            assert layer.self_attn.kv_a_proj_with_mqa.fmt == f and layer.self_attn.o_proj.fmt == f
        head = "fp32" if p == "fp32" else "bf16"
        assert m.head_fmt == head and m.model.layers[L].eh_proj.fmt == head


@check
def moe_low_precision_matches_naive():
    """Forward of an MoE layer in each recipe, token by token: the routed experts take the
    row-quantized token as it is, their outputs are rounded to bf16 before the gates; the
    shared expert quantizes the unquantized token itself; the router stays unquantized."""
    cfg = micro_config(hidden_size=48, moe_intermediate_size=40)
    g = torch.Generator().manual_seed(28)
    x = torch.randn(2, 5, cfg.hidden_size, dtype=torch.float64, generator=g)
    for fmt in ("bf16", "mxfp8", "fp8-blockwise"):
        m = new_model(cfg, seed=29)
        m.set_precision(fmt, bf16_layers=0)
        moe = m.model.layers[1].mlp
        y, aux = moe(x)
        xf = x.reshape(-1, cfg.hidden_size)
        s = torch.sigmoid(xf @ moe.gate.weight.T)
        xq = quant.qop(xf, fmt, "rows")
        yn = torch.zeros_like(xf)
        for n in range(xf.shape[0]):
            ch = aux.chosen[n].tolist()
            w = torch.stack([s[n, e] for e in ch])
            w = w / w.sum() * cfg.routed_scaling_factor
            for wk, e in zip(w, ch):
                ex = moe.experts[e]
                wgu = torch.cat([ex.gate_proj.weight, ex.up_proj.weight])
                gu = xq[n:n + 1] @ quant.qop(wgu, fmt, quant.weight_axis(fmt, False)).T
                gg, uu = gu.split(cfg.moe_intermediate_size, -1)
                h = torch.nn.functional.silu(gg) * uu
                ye = quant.qop(h, fmt, "rows") @ quant.qop(ex.down_proj.weight, fmt,
                                                              quant.weight_axis(fmt, False)).T
                yn[n] += wk * quant.qop(ye, "bf16")[0]
            yn[n] += moe.shared_experts(xf[n:n + 1])[0]
        assert torch.allclose(y.reshape(-1, cfg.hidden_size), yn, rtol=1e-12, atol=1e-14), fmt
        # backward runs, and the gradient reaching x through the dispatch is unquantized
        xr = x.clone().requires_grad_(True)
        moe(xr)[0].sum().backward()
        assert torch.isfinite(xr.grad).all()


# ------------------------------------------------------------------------------------------
def check_golden(gdir, config):
    """Structure of the golden files, and step.safetensors re-derived from params."""
    cfg = load_config(config)
    params = load_file(os.path.join(gdir, "params.safetensors"))
    step = load_file(os.path.join(gdir, "step.safetensors"))
    train = load_file(os.path.join(gdir, "train.safetensors"))
    import json
    from safetensors_io import load_metadata
    meta = load_metadata(os.path.join(gdir, "step.safetensors"))
    # the recipe the files were written in (fp32 files carry no "precision" key)
    m = DeepseekV3(cfg, torch.float64, precision=meta.get("precision", "fp32"),
                   bf16_layers=int(meta.get("bf16_layers", "1")))
    print(f"    golden precision {m.precision} (bf16_layers {m.bf16_layers})")
    load_hf_state_dict(m, params)
    assert all(t.dtype == torch.float32 for t in params.values())
    # the 4-bit recipes' stochastic roundings: the generator as make_golden.py seeded it
    seed = json.loads(meta["spec"])["seed"] if "spec" in meta else 0
    quant.fp4_generator(int(meta.get("sr_seed", seed)))
    tok = step["tokens"]
    assert tok.dtype == torch.int32 and tok.dim() == 2
    out = m(tok.long(), return_logits=True)
    spec_w = LossWeights(0.3, 0.01, 0.001)
    if "spec" in meta:
        sp = json.loads(meta["spec"])
        spec_w = LossWeights(sp["mtp_lambda"], sp["balance_alpha"], sp["z_loss_coef"])
    loss, parts = combine_losses(out, spec_w, cfg.num_nextn_predict_layers)
    loss.backward()
    for k, v in [("loss", loss)] + list(parts.items()):
        assert step[k].shape == (1,) and abs(step[k].item() - v.item()) <= 1e-6 * max(1, abs(v.item())), k
    assert torch.allclose(step["logits"].double(), out.logits, rtol=1e-6, atol=1e-7)
    for n, p in m.named_parameters():
        g = step["grad." + n].double()
        assert torch.allclose(g, p.grad, rtol=1e-5, atol=1e-9), n
    assert not any("e_score_correction_bias" in k for k in step if k.startswith("grad."))
    tt = train["tokens"]
    assert tt.dtype == torch.int32 and tt.dim() == 4
    S = tt.shape[0]
    assert train["losses"].shape == (S,) and train["lm_losses"].shape == (S,)
    assert all(torch.isfinite(train["losses"]))
    for l in cfg.moe_layers():
        assert train[f"bias.{l}"].shape == (cfg.n_routed_experts,)


def main() -> int:
    ap = argparse.ArgumentParser(description="self-check of the PyTorch reference")
    ap.add_argument("--golden", help="directory written by make_golden.py to verify")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "tiny.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    fails = 0
    todo = [(fn.__name__, fn) for fn in CHECKS]
    if args.golden:
        todo.append(("golden_files", lambda: check_golden(args.golden, args.config)))
    for name, fn in todo:
        try:
            fn()
            print(f"PASS {name}")
        except Exception as e:  # report every failing check, then exit non-zero
            fails += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
    print(f"{len(todo) - fails}/{len(todo)} checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
