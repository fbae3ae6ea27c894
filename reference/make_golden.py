#!/usr/bin/env python3
"""Write the golden files of docs/model.md ("Golden files") for one config.

usage: make_golden.py CONFIG OUTDIR [--spec reference/golden_spec.json]
                      [--precision fp32|bf16|mxfp8|fp8-blockwise|nvfp4|mxfp4]
                      [--bf16-layers N] [--sr-seed S]

Prints one line per file written on stdout (per-step training losses go to stderr).
Float64 math throughout, tensors saved as F32 (tokens I32):
  params.safetensors  every parameter + e_score_correction_bias, by HF name (seeded init)
  step.safetensors    tokens [B,T+1], logits [B*T,V], loss, lm_loss, mtp_loss, balance_loss,
                      z_loss ([1] each; the last three unweighted sums), grad.<name>; under
                      the 4-bit recipes also grad_mean.<name>, the mean gradient over
                      FP4_DRAWS backward passes with other stochastic roundings and sign
                      vectors (generator seeded seed + 1 + k, signs drawn first)
  train.safetensors   tokens [steps,grad_accum,B,T+1], losses [steps], lm_losses [steps],
                      bias.<layer> (final e_score_correction_bias of each MoE layer)

Random draws, all from one torch.Generator seeded with spec["seed"], in this order:
  1. parameters, in hf_state_dict order (float64 normal draws, rounded to F32 before use so
     the float64 math uses exactly the stored values);
  2. step tokens [B, T+1]; 3. train tokens [steps, grad_accum, B, T+1]
(tokens uniform over the vocabulary).  Training starts from the params.safetensors values.

--precision runs every GEMM in the recipe of docs/precision.md (reference/quant.py: float64
math on the quantized operands, quantized from their float32 rounding); the parameters and
tokens do not depend on it (params.safetensors is the same file in every precision).  A
non-fp32 recipe is recorded in the metadata of step and train ("precision", "bf16_layers"); fp32
files carry no such key, so they are byte for byte what they were before the recipes existed.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from config import load_config  # noqa: E402
from model import (MoE, DeepseekV3, combine_losses, hf_state_dict,  # noqa: E402
                   init_parameters, routing_margin)
from quant import FP4, PRECISIONS, fp4_generator  # noqa: E402
from safetensors_io import save_file  # noqa: E402
from train import TrainHParams, make_optimizer, train_step  # noqa: E402

FP4_DRAWS = 128   # backward passes averaged into grad_mean (the 4-bit recipes)

REQUIRED_SPEC = ["seed", "micro_batch", "seq", "grad_accum", "steps", "lr", "warmup",
                 "beta1", "beta2", "eps", "weight_decay", "grad_clip", "mtp_lambda",
                 "balance_alpha", "z_loss_coef", "bias_update_rate"]


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float32).contiguous()


def _scalar(x: torch.Tensor) -> torch.Tensor:
    return _f32(x).reshape(1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("config", help="Hugging Face DeepSeek-V3 config.json")
    ap.add_argument("outdir", help="directory to write the golden files into")
    ap.add_argument("--spec", default=os.path.join(HERE, "golden_spec.json"))
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 keeps the float64 sums in one fixed order)")
    ap.add_argument("--precision", default="fp32", choices=PRECISIONS,
                    help="training recipe of docs/precision.md (default fp32)")
    ap.add_argument("--bf16-layers", type=int, default=1,
                    help="FP8 and FP4 recipes: first and last N main decoder layers in bf16 "
                         "(default 1)")
    ap.add_argument("--sr-seed", type=int, default=None,
                    help="FP4 recipes: seed of the stochastic roundings' generator (default: the "
                         "spec's seed)")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="the math (float32: one emulated fp32 implementation, to measure how "
                         "far such a one lands from the float64 files)")
    args = ap.parse_args(argv)

    t0 = time.time()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    with open(args.spec) as f:
        spec = json.load(f)
    missing = [k for k in REQUIRED_SPEC if k not in spec]
    if missing:
        raise ValueError(f"spec {args.spec}: missing keys {missing}")
    hp = TrainHParams.from_dict(spec)
    B, T, GA, S = int(spec["micro_batch"]), int(spec["seq"]), int(spec["grad_accum"]), int(spec["steps"])
    V = cfg.vocab_size
    os.makedirs(args.outdir, exist_ok=True)
    meta = {"config": os.path.abspath(args.config), "spec": json.dumps(spec, sort_keys=True),
            "generator": "reference/make_golden.py (float64 math, F32 storage)"}
    params_meta = dict(meta)   # the parameters do not depend on the recipe
    if args.precision != "fp32":
        meta["precision"] = args.precision
        meta["bf16_layers"] = str(args.bf16_layers)

    # ---- parameters ------------------------------------------------------------------
    gen = torch.Generator().manual_seed(int(spec["seed"]))
    fp4_generator(int(spec["seed"]) if args.sr_seed is None else args.sr_seed)
    if args.sr_seed is not None:
        meta["sr_seed"] = str(args.sr_seed)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    if dtype != torch.float64:
        meta["dtype"] = args.dtype
    model = DeepseekV3(cfg, dtype, precision=args.precision, bf16_layers=args.bf16_layers)
    init_parameters(model, gen, round_to_fp32=True)
    init_state = {n: t.detach().clone() for n, t in hf_state_dict(model).items()}
    path = os.path.join(args.outdir, "params.safetensors")
    save_file({n: _f32(t) for n, t in init_state.items()}, path, params_meta)
    print(f"wrote {path}: {len(init_state)} tensors, "
          f"{sum(t.numel() for t in init_state.values())} values")

    # ---- tokens (drawn up front, in a fixed order) -------------------------------------
    step_tokens = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    train_tokens = torch.randint(0, V, (S, GA, B, T + 1), generator=gen, dtype=torch.int64)

    # Diagnostic: the smallest routing decision margin seen (near-ties are where an fp32
    # implementation may legitimately choose other experts than this float64 reference).
    margins = {"min": float("inf")}

    def margin_hook(mod, inp, _out):
        with torch.no_grad():
            x = inp[0].reshape(-1, cfg.hidden_size)
            sel = torch.sigmoid(x @ mod.gate.weight.T) + mod.gate.e_score_correction_bias
            m = routing_margin(sel, cfg.n_group, cfg.topk_group, cfg.num_experts_per_tok)
            margins["min"] = min(margins["min"], m)

    for mod in model.modules():
        if isinstance(mod, MoE):
            mod.register_forward_hook(margin_hook)

    # ---- one forward/backward ----------------------------------------------------------
    out = model(step_tokens, return_logits=True)
    loss, parts = combine_losses(out, hp.loss_weights(), cfg.num_nextn_predict_layers)
    loss.backward()
    step = {"tokens": step_tokens.to(torch.int32), "logits": _f32(out.logits),
            "loss": _scalar(loss), "lm_loss": _scalar(parts["lm_loss"]),
            "mtp_loss": _scalar(parts["mtp_loss"]), "balance_loss": _scalar(parts["balance_loss"]),
            "z_loss": _scalar(parts["z_loss"])}
    for n, p in model.named_parameters():   # trainable parameters (router biases excluded)
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        step["grad." + n] = _f32(g)
    if args.precision in FP4:
        # the stochastic parts averaged: what moet's mean over as many draws is held against
        base = int(spec["seed"]) if args.sr_seed is None else args.sr_seed
        sums = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
        for k in range(FP4_DRAWS):
            fp4_generator(base + 1 + k, random_signs=True)
            model.zero_grad(set_to_none=True)
            o = model(step_tokens)
            combine_losses(o, hp.loss_weights(), cfg.num_nextn_predict_layers)[0].backward()
            for n, p in model.named_parameters():
                if p.grad is not None:
                    sums[n] += p.grad
        for n, t in sums.items():
            step["grad_mean." + n] = _f32(t / FP4_DRAWS)
        fp4_generator(base)
        model.zero_grad(set_to_none=True)
        meta["fp4_draws"] = str(FP4_DRAWS)
    path = os.path.join(args.outdir, "step.safetensors")
    save_file(step, path, meta)
    print(f"wrote {path}: loss {loss.item():.6f} lm_loss {parts['lm_loss'].item():.6f} "
          f"mtp_loss {parts['mtp_loss'].item():.6f} balance_loss {parts['balance_loss'].item():.6f} "
          f"z_loss {parts['z_loss'].item():.6f} (min routing margin {margins['min']:.3g})")
    margins["min"] = float("inf")

    # ---- training run from the same initial parameters ---------------------------------
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model, hp, foreach=False)
    losses, lm_losses = [], []
    for s in range(S):
        r = train_step(model, opt, [train_tokens[s, a] for a in range(GA)], hp, s)
        losses.append(r["loss"])
        lm_losses.append(r["lm_loss"])
        print(f"  step {s}: loss {r['loss']:.6f} lm_loss {r['lm_loss']:.6f} "
              f"grad_norm {r['grad_norm']:.6f} lr {r['lr']:.6g}", file=sys.stderr)
    train = {"tokens": train_tokens.to(torch.int32),
             "losses": torch.tensor(losses, dtype=torch.float32),
             "lm_losses": torch.tensor(lm_losses, dtype=torch.float32)}
    for l in cfg.moe_layers():
        bias = model.model.layers[l].mlp.gate.e_score_correction_bias
        train[f"bias.{l}"] = _f32(bias)
    path = os.path.join(args.outdir, "train.safetensors")
    save_file(train, path, meta)
    print(f"wrote {path}: {S} steps, final loss {losses[-1]:.6f}, "
          f"min routing margin {margins['min']:.3g} ({time.time() - t0:.1f}s total)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # a clear one-line message and a non-zero exit
        print(f"make_golden.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
