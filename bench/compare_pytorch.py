#!/usr/bin/env python3
"""moet vs the PyTorch reference, side by side in one run (docs/benchmarks.md).

usage: bench/compare_pytorch.py [--model configs/small.json] [--micro-batch 8] [--seq 256]
                                [--threads 2] [--steps 8] [--warmup 2] [--rounds 2]

Alternates moet and the PyTorch peer (reference/bench_train.py: eager fp32, tokens sorted by
expert with one matmul per expert, tcmalloc preloaded, same batch and threads) for --rounds
rounds on mock tokens, each timing --steps - --warmup steps after --warmup untimed ones, and
prints a Markdown table: tokens/s, model GFLOP/s (Megatron formula), share of the fp32 GEMM
peak that moet measures at start-up, and the ratio. The loss settings are the same on both
sides (MTP 0.3, balance 1e-4, z-loss 1e-3, clipping, bias update).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


def run_moet(a):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        cmd = [os.path.join(ROOT, "build", "moet"), "train", "--model", a.model, "--data", "mock",
               "--steps", str(a.steps), "--micro-batch", str(a.micro_batch), "--seq", str(a.seq),
               "--threads", str(a.threads), "--z-loss", "1e-3", "--eval-batches", "0",
               "--metrics", metrics]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        peak = float(out.split(" GEMM peak ")[1].split()[0])  # "MFU divides by the fp32 GEMM peak X"
        rows = [json.loads(l) for l in open(metrics)][a.warmup:]
        step_s = sum(r["step_time_s"] for r in rows) / len(rows)
        tokens = a.micro_batch * a.seq
        return {"tokens_per_s": tokens / step_s, "gflops": 1e3 * sum(r["tflops"] * r["step_time_s"]
                for r in rows) / sum(r["step_time_s"] for r in rows), "step_s": step_s,
                "peak_gflops": peak * 1e3}


def run_torch(a):
    env = dict(os.environ)
    if os.path.exists(TCMALLOC):
        env["LD_PRELOAD"] = TCMALLOC
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "reference", "bench_train.py"), "--model",
           a.model, "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--steps",
           str(a.steps), "--threads", str(a.threads), "--warmup-steps", str(a.warmup),
           "--z-loss-coef", "1e-3"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "configs", "small.json"))
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    moet, torch = [], []
    for r in range(a.rounds):
        moet.append(run_moet(a))
        torch.append(run_torch(a))
        print(f"round {r + 1}: moet {moet[-1]['tokens_per_s']:.0f} tok/s, "
              f"pytorch {torch[-1]['tokens_per_s']:.0f} tok/s", file=sys.stderr)
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    peak = med(moet, "peak_gflops")
    mt, pt = med(moet, "tokens_per_s"), med(torch, "tokens_per_s")
    mg, pg = med(moet, "gflops"), med(torch, "gflops")
    print(f"| | tokens/s | model GFLOP/s | share of fp32 GEMM peak ({peak:.0f} GFLOP/s) |")
    print("|---|---|---|---|")
    print(f"| moet (fp32) | {mt:.0f} | {mg:.1f} | {100 * mg / peak:.0f}% |")
    print(f"| PyTorch reference (fp32) | {pt:.0f} | {pg:.1f} | {100 * pg / peak:.0f}% |")
    print(f"| **moet / PyTorch** | **{mt / pt:.2f}×** | | |")
    ratios = [m["tokens_per_s"] / t["tokens_per_s"] for m, t in zip(moet, torch)]
    print("\nper round (moet run, then PyTorch run): " + ", ".join(
        f"{m['tokens_per_s']:.0f} vs {t['tokens_per_s']:.0f} tok/s = {r:.2f}×"
        for m, t, r in zip(moet, torch, ratios)))
    print(f"\nmedian of {a.rounds} alternating rounds; {a.model}, micro-batch {a.micro_batch}, "
          f"seq {a.seq}, {a.threads} threads, {a.steps - a.warmup} timed steps after "
          f"{a.warmup} warm-up")


if __name__ == "__main__":
    main()
