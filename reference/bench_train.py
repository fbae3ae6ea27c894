#!/usr/bin/env python3
"""PyTorch benchmark peer: float32 eager training throughput of the reference model.

usage: bench_train.py --model CONFIG --micro-batch B --seq T --steps N --threads N
                      [--dtype fp32] [--warmup-steps W] [--grad-accum A]

Runs N optimizer steps on random (mock) tokens with AdamW and the full training step
(MTP, balance/z losses, clipping, router-bias update).  The first W steps are warm-up and
are not timed; tokens/s and model GFLOP/s (Megatron formula, flops.py) are measured over
the remaining N-W steps.  The last stdout line is JSON:
  {"tokens_per_s": ..., "gflops": ..., "step_s": ..., ...}
Tokens per step = micro_batch * seq * grad_accum (the main-model tokens).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _pin_library_threads(argv):
    """Make the BLAS/OpenMP pools honour --threads too: torch.set_num_threads does not size
    Debian torch's OpenBLAS pool, which is read from the environment at load time."""
    for i, a in enumerate(argv):
        n = a.split("=", 1)[1] if a.startswith("--threads=") else (
            argv[i + 1] if a == "--threads" and i + 1 < len(argv) else None)
        if n is not None and n.isdigit():
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ.setdefault(var, n)
    # OpenMP workers that spin after each parallel region starve OpenBLAS's own pthreads
    # (and the other way round) when both pools share few cores: measured 3-10x slower
    # steps on the 2-core machine.  Sleeping at once is the best setting for this peer.
    os.environ.setdefault("GOMP_SPINCOUNT", "0")


_pin_library_threads(sys.argv[1:])

import torch  # noqa: E402

from config import load_config  # noqa: E402
from flops import flops_per_token  # noqa: E402
from model import DeepseekV3, init_parameters  # noqa: E402
from train import TrainHParams, make_optimizer, train_step  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="PyTorch reference training benchmark")
    ap.add_argument("--model", required=True, help="Hugging Face DeepSeek-V3 config.json")
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="total steps, warm-up included")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--dtype", default="fp32", choices=["fp32"])
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--mtp-lambda", type=float, default=0.3)
    ap.add_argument("--balance-alpha", type=float, default=1e-4)
    ap.add_argument("--z-loss-coef", type=float, default=1e-3)
    args = ap.parse_args(argv)
    if args.steps <= args.warmup_steps:
        raise ValueError(f"--steps ({args.steps}) must exceed --warmup-steps ({args.warmup_steps})")

    torch.set_num_threads(args.threads)
    cfg = load_config(args.model)
    B, T, GA = args.micro_batch, args.seq, args.grad_accum
    gen = torch.Generator().manual_seed(args.seed)
    model = DeepseekV3(cfg, torch.float32)
    init_parameters(model, gen)
    hp = TrainHParams(lr=args.lr, warmup=0, schedule="constant", steps=args.steps,
                      mtp_lambda=args.mtp_lambda, balance_alpha=args.balance_alpha,
                      z_loss_coef=args.z_loss_coef)
    opt = make_optimizer(model, hp, foreach=True)

    tokens_per_step = B * T * GA
    fpt = flops_per_token(cfg, T, mtp=cfg.num_nextn_predict_layers > 0)
    timed = 0.0
    for s in range(args.steps):
        batches = [torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen) for _ in range(GA)]
        t0 = time.perf_counter()
        r = train_step(model, opt, batches, hp, s)
        dt = time.perf_counter() - t0
        tag = "warmup" if s < args.warmup_steps else "timed"
        print(f"step {s} ({tag}): loss {r['loss']:.4f} {dt:.3f}s "
              f"{tokens_per_step / dt:.1f} tok/s", flush=True)
        if s >= args.warmup_steps:
            timed += dt
    n = args.steps - args.warmup_steps
    tps = tokens_per_step * n / timed
    result = {"tokens_per_s": round(tps, 3),
              "gflops": round(fpt * tps / 1e9, 3),
              "step_s": round(timed / n, 6),
              "gflop_per_token": round(fpt / 1e9, 6),
              "timed_steps": n, "tokens_per_step": tokens_per_step,
              "threads": args.threads, "dtype": args.dtype, "impl": "pytorch-eager",
              "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                     "GOMP_SPINCOUNT", "LD_PRELOAD")},
              "torch": torch.__version__}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:
        print(f"bench_train.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
