#!/usr/bin/env python3
"""moet vs the PyTorch 2 peer (bench/pytorch_peer.py: eager and torch.compile), side by side in
one run — the speed comparisons of docs/benchmarks.md.

usage: python3 bench/compare_peer.py [--model configs/small.json] [--vocab V] [--dtype fp32|bf16]
           [--moet-precision P] [--micro-batch 4] [--seq 256] [--threads 2] [--steps 8]
           [--warmup 2] [--rounds 3] [--no-compile]

Each round runs moet (`moet train --data mock`, the given precision: fp32 for --dtype fp32, the
recipe for bf16), then the peer eager, then the peer under torch.compile, all on mock tokens
with the same batch, sequence, threads and loss settings (MTP 0.3, balance 1e-4, z-loss 1e-3,
clipping, AdamW, expert-bias update), tcmalloc preloaded for the peer; --steps counts warm-up
steps, which are not timed. Prints the CPU, its bf16 instruction set, each round and the
medians as a Markdown table; the ratio is moet over the faster peer.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from cpu import cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"



def model_config(a, d):
    """The config with --vocab applied (a copy in d)."""
    if not a.vocab:
        return a.model
    with open(a.model) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = a.vocab
    path = os.path.join(d, "model.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def run_moet(a, model, d):
    metrics = os.path.join(d, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    precision = a.moet_precision or a.dtype
    cmd = [os.path.join(ROOT, "build", "moet"), "train", "--model", model, "--data", "mock",
           "--steps", str(a.steps), "--micro-batch", str(a.micro_batch), "--seq", str(a.seq),
           "--threads", str(a.threads), "--z-loss", "1e-3", "--eval-batches", "0",
           "--precision", precision, "--metrics", metrics, "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = [json.loads(l) for l in open(metrics)][a.warmup:]
    step_s = sum(r["step_time_s"] for r in rows) / len(rows)
    return a.micro_batch * a.seq / step_s


def run_peer(a, model, compile_):
    env = dict(os.environ)
    if os.path.exists(TCMALLOC):
        env["LD_PRELOAD"] = TCMALLOC
    py = subprocess.run(["bash", os.path.join(ROOT, "scripts", "venv.sh")], check=True,
                        capture_output=True, text=True).stdout.strip()
    cmd = [py, os.path.join(ROOT, "bench", "pytorch_peer.py"), "--model", model,
           "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--steps", str(a.steps),
           "--warmup-steps", str(a.warmup), "--threads", str(a.threads), "--dtype", a.dtype]
    if compile_:
        cmd.append("--compile")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "configs", "small.json"))
    ap.add_argument("--vocab", type=int, default=0, help="override the config's vocab_size")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--moet-precision", default="", help="moet's recipe (default: --dtype)")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    print(f"CPU: {cpu_line()}", file=sys.stderr)
    runs = {"moet": [], "eager": [], "compile": []}
    with tempfile.TemporaryDirectory() as d:
        model = model_config(a, d)
        for r in range(a.rounds):
            runs["moet"].append(run_moet(a, model, d))
            runs["eager"].append(run_peer(a, model, False))
            if not a.no_compile:
                runs["compile"].append(run_peer(a, model, True))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in runs.items() if v)
                  + " tokens/s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    best = max(med.get("eager", 0), med.get("compile", 0))
    print(f"CPU: {cpu_line()}\n")
    print("| | tokens/s (median) | per round |\n|---|---|---|")
    names = {"moet": f"moet ({a.moet_precision or a.dtype})", "eager": f"PyTorch 2 eager ({a.dtype})",
             "compile": f"PyTorch 2 torch.compile ({a.dtype})"}
    for k, v in runs.items():
        if v:
            print(f"| {names[k]} | {med[k]:.0f} | {', '.join(f'{x:.0f}' for x in v)} |")
    print(f"| **moet / faster peer** | **{med['moet'] / best:.2f}×** | |")
    print(f"\n{a.rounds} alternating rounds; {os.path.basename(a.model)}"
          f"{f' with vocab {a.vocab}' if a.vocab else ''}, micro-batch {a.micro_batch} x {a.seq}, "
          f"{a.threads} threads, {a.steps - a.warmup} timed steps after {a.warmup} warm-up")


if __name__ == "__main__":
    main()
