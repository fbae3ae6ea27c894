#!/usr/bin/env python3
"""PyTorch 2 training-throughput peer for moet's model (bench/peer_model.py), run with the
project venv (scripts/venv.sh), not Debian's torch 1.13.

usage: PY=$(bash scripts/venv.sh)
       LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
       $PY bench/pytorch_peer.py --model CONFIG.json --micro-batch B --seq T --steps N \
           --warmup-steps W --threads N --dtype fp32|bf16 [--compile [--compile-mode M]] \
           [--grad-accum A] [--vocab V] [--seed S] [--pad-v auto|on|off]
       $PY bench/pytorch_peer.py --check [--model configs/tiny.json] [--compile]

Trains on mock tokens (uniform in [0, vocab), seeded) with the full step of docs/model.md:
MTP (λ 0.3), sequence-wise balance loss (α 1e-4), router z-loss (1e-3), grad accumulation,
clip_grad_norm_(1.0, foreach), AdamW (β 0.9/0.95, wd 0.1 on 2-D weights; fused on CPU when
available, else foreach), then the aux-loss-free router-bias update (γ 1e-3).
--steps counts all steps; the first --warmup-steps (which include torch.compile's
compilation) are not timed. Tokens per step = micro_batch * seq * grad_accum.
--dtype bf16 runs the forward under torch.autocast("cpu", bfloat16) with fp32 master
weights (router, norms, losses in fp32). --compile wraps forward+loss in torch.compile (the
expert loop stays eager: torch.compiler.disable). --threads sets OMP_NUM_THREADS before
torch is imported and torch.set_num_threads. tcmalloc is the caller's job (LD_PRELOAD above,
as PyTorch's CPU performance guide advises); the JSON says whether it was preloaded.
The last stdout line is JSON: tokens_per_s, step_s, gflops (model FLOP/s by
reference/flops.py's Megatron formula), dtype, compile (bool) and compile_mode,
torch_version, threads, loss_first, loss_last, and more.

--check: builds reference/model.py (same torch) with its seeded init, copies the parameters
into the peer by Hugging Face names, and compares on the same tokens, in fp32: the loss and
its parts, every gradient, and the loss after one full training step of each side
(reference/train.py vs the peer's). Exits 1 if |Δloss| > 1e-4 (or a gradient or the
post-step loss disagrees).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "reference"))
sys.path.insert(0, HERE)


def _threads_from_argv(argv):
    for i, a in enumerate(argv):
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
    return None


_n = _threads_from_argv(sys.argv[1:])
if _n is not None and _n.isdigit():
    os.environ["OMP_NUM_THREADS"] = _n
    os.environ["MKL_NUM_THREADS"] = _n

import torch  # noqa: E402

from config import load_config  # noqa: E402  (reference/config.py)
from flops import flops_per_token  # noqa: E402  (reference/flops.py)
from cpu import cpu_model  # noqa: E402
from peer_model import PeerModel  # noqa: E402

BIAS_RATE = 1e-3


def make_optimizer(model, lr, wd=0.1):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True), "fused"
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=True), "foreach"


def train_step(model, fwd, opt, params, micro_batches):
    """One optimizer step; returns (mean loss, pre-clip grad norm)."""
    opt.zero_grad(set_to_none=True)
    ga = len(micro_batches)
    loss_sum = 0.0
    loads = None
    for seq in micro_batches:
        loss, _, ld = fwd(seq)
        (loss / ga).backward()
        loss_sum += loss.item()
        loads = ld if loads is None else [a + b for a, b in zip(loads, ld)]
    # Experts without a token still take a (zero-gradient) AdamW step, as in moet and the
    # reference: weight decay and moment decay apply to every parameter.
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    opt.step()
    with torch.no_grad():   # aux-loss-free balancing: b += γ sign(mean(load) - load)
        for moe, load in zip(model.moe_blocks(), loads or []):
            moe.bias.add_(BIAS_RATE * torch.sign(load.mean() - load))
    return loss_sum / ga, float(gnorm)


def build_fwd(model, compile_mode):
    if compile_mode is None:
        return model
    return torch.compile(model, mode=None if compile_mode == "default" else compile_mode)



def run_bench(a):
    cfg = load_config(a.model)
    if a.vocab is not None:
        cfg.vocab_size = a.vocab
    if a.steps <= a.warmup_steps:
        raise ValueError(f"--steps ({a.steps}) must exceed --warmup-steps ({a.warmup_steps})")
    if a.compile and a.warmup_steps < 1:
        raise ValueError("--compile needs --warmup-steps >= 1 (compilation is not timed)")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    B, T, GA = a.micro_batch, a.seq, a.grad_accum
    lowp = torch.bfloat16 if a.dtype == "bf16" else None
    model = PeerModel(cfg, autocast_dtype=lowp)
    model.init_(gen)
    pad_v = a.pad_v == "on" or (a.pad_v == "auto" and a.dtype == "fp32")
    model.set_pad_v(pad_v)
    model.rope(T)                                    # fill the table cache before compiling
    params = list(model.parameters())
    opt, opt_kind = make_optimizer(model, a.lr)
    mode = a.compile_mode if a.compile else None
    fwd = build_fwd(model, mode)

    tokens_per_step = B * T * GA
    fpt = flops_per_token(cfg, T, mtp=cfg.num_nextn_predict_layers > 0)
    print(f"pytorch_peer: torch {torch.__version__}, {a.dtype}"
          f"{' (autocast bf16, fp32 master weights)' if lowp else ''}, "
          + (f"torch.compile(mode={a.compile_mode}) with the expert loop eager "
             f"(one graph break per MoE layer)" if a.compile else "eager")
          + f", {a.threads} threads, AdamW {opt_kind}, SDPA{' (v padded)' if pad_v else ''}, "
          f"{sum(p.numel() for p in params) / 1e6:.1f}M parameters, "
          f"{tokens_per_step} tokens/step", flush=True)
    timed, losses, warm_s = 0.0, [], 0.0
    for s in range(a.steps):
        batches = [torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen) for _ in range(GA)]
        t0 = time.perf_counter()
        loss, gnorm = train_step(model, fwd, opt, params, batches)
        dt = time.perf_counter() - t0
        losses.append(loss)
        tag = "warmup" if s < a.warmup_steps else "timed"
        print(f"step {s} ({tag}): loss {loss:.4f} grad_norm {gnorm:.3f} {dt:.3f}s "
              f"{tokens_per_step / dt:.1f} tok/s", flush=True)
        if s >= a.warmup_steps:
            timed += dt
        else:
            warm_s += dt
    n = a.steps - a.warmup_steps
    tps = tokens_per_step * n / timed
    ld = os.environ.get("LD_PRELOAD", "")
    result = {
        "tokens_per_s": round(tps, 3), "step_s": round(timed / n, 6),
        "gflops": round(fpt * tps / 1e9, 3), "gflop_per_token": round(fpt / 1e9, 6),
        "dtype": a.dtype, "compile": a.compile,
        "compile_mode": a.compile_mode if a.compile else None,
        "torch_version": torch.__version__, "threads": a.threads,
        "loss_first": round(losses[0], 6), "loss_last": round(losses[-1], 6),
        "timed_steps": n, "warmup_s": round(warm_s, 3), "tokens_per_step": tokens_per_step,
        "micro_batch": B, "seq": T, "grad_accum": GA, "vocab": cfg.vocab_size,
        "optimizer": f"AdamW({opt_kind})", "attention": "sdpa" + ("+pad_v" if pad_v else ""),
        "tcmalloc": "tcmalloc" in ld, "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "impl": "pytorch2-peer",
    }
    print(json.dumps(result))
    return 0


def run_check(a):
    from model import DeepseekV3, LossWeights, combine_losses, hf_state_dict, init_parameters
    from train import TrainHParams, make_optimizer as ref_make_optimizer, train_step as ref_step

    torch.set_num_threads(a.threads or 1)
    cfg = load_config(a.model)
    if a.vocab is not None:
        cfg.vocab_size = a.vocab
    B, T = a.micro_batch or 2, a.seq or 32
    gen = torch.Generator().manual_seed(a.seed)
    ref = DeepseekV3(cfg, torch.float32)
    init_parameters(ref, gen, round_to_fp32=True)
    peer = PeerModel(cfg)
    peer.load_hf(hf_state_dict(ref))
    peer.set_pad_v(a.pad_v == "on")
    peer.rope(T)
    fwd = build_fwd(peer, a.compile_mode if a.compile else None)
    seqs = [torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen) for _ in range(2)]

    w = LossWeights(mtp_lambda=0.3, balance_alpha=1e-4, z_loss_coef=1e-3)
    out = ref(seqs[0])
    r_loss, r_parts = combine_losses(out, w, cfg.num_nextn_predict_layers)
    p_loss, p_parts, p_loads = fwd(seqs[0])
    ok = True
    d = abs(r_loss.item() - p_loss.item())
    print(f"loss: reference {r_loss.item():.8f} peer {p_loss.item():.8f} |Δ| {d:.3e}")
    ok &= d <= 1e-4
    for k in r_parts:
        print(f"  {k}: reference {r_parts[k].item():.8f} peer {p_parts[k].item():.8f}")
    r_loads = [out.loads[l] for l in sorted(out.loads)]
    same_loads = all(torch.equal(x.to(torch.float32), y) for x, y in zip(r_loads, p_loads))
    print(f"expert loads identical: {same_loads}")
    ok &= same_loads

    r_loss.backward()
    p_loss.backward()
    r_g = {n: (p.grad if p.grad is not None else torch.zeros_like(p))
           for n, p in ref.named_parameters()}
    p_g = peer.to_hf(grads=True)
    worst, worst_name = 0.0, ""
    for n, g in r_g.items():
        err = ((p_g[n] - g).norm() / g.norm().clamp_min(1e-12)).item()
        if err > worst:
            worst, worst_name = err, n
    print(f"gradients: worst relative error {worst:.3e} ({worst_name}) over {len(r_g)} tensors")
    ok &= worst <= 1e-3

    # One full training step on each side, then the loss on a fresh batch.
    hp = TrainHParams(lr=1e-3, schedule="constant", steps=1, z_loss_coef=1e-3)
    r_opt = ref_make_optimizer(ref, hp)
    ref_step(ref, r_opt, [seqs[0]], hp, 0)
    params = list(peer.parameters())
    p_opt, _ = make_optimizer(peer, 1e-3)
    train_step(peer, fwd, p_opt, params, [seqs[0]])
    with torch.no_grad():
        r2 = combine_losses(ref(seqs[1]), w, cfg.num_nextn_predict_layers)[0].item()
        p2 = fwd(seqs[1])[0].item()
    d2 = abs(r2 - p2)
    print(f"loss after one step: reference {r2:.8f} peer {p2:.8f} |Δ| {d2:.3e}")
    ok &= d2 <= 1e-4
    print("check " + ("passed" if ok else "FAILED") +
          f" (torch {torch.__version__}, {'compile' if a.compile else 'eager'}, fp32)")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch 2 training-throughput peer of moet")
    ap.add_argument("--model", default=None, help="Hugging Face DeepSeek-V3 config.json")
    ap.add_argument("--micro-batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--steps", type=int, help="total steps, warm-up included")
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true", help="torch.compile forward+loss")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--vocab", type=int, help="override the config's vocab_size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--pad-v", default="auto", choices=["auto", "on", "off"],
                    help="zero-pad v to the q/k head dim so SDPA can use the CPU flash "
                         "kernel (auto: fp32 only; bf16 flash is slow without AVX-512)")
    ap.add_argument("--check", action="store_true",
                    help="compare with reference/model.py on a tiny config and exit")
    a = ap.parse_args(argv)
    if a.check:
        a.model = a.model or os.path.join(ROOT, "configs", "tiny.json")
        return run_check(a)
    missing = [f for f in ("model", "micro_batch", "seq", "steps", "threads")
               if getattr(a, f) is None]
    if missing:
        ap.error("missing " + ", ".join("--" + m.replace("_", "-") for m in missing))
    return run_bench(a)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:
        print(f"pytorch_peer.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
