#!/usr/bin/env python3
"""The largest micro-batch a machine trains with and without activation recomputation
(docs/training.md, "Memory"): for each variant (none, Megatron's MoE set, full), the number of
sequences per micro-batch is doubled and then bisected on the memory the trainer plans (the
header's `memory:` total, read from a run stopped once the header is out); the largest that fits
--budget-gib is then trained for --steps steps, and its peak resident set (`peak_rss_mb`) and
step time are reported.

usage: python3 bench/largest_config.py [--moet build/moet] [--model configs/bench-dsv3.json]
           [--precision fp32] [--seq 512] [--budget-gib 21] [--steps 2] [--threads 2]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from cpu import cpu_model

VARIANTS = [
    ("none", []),
    ("mla_up_proj moe_act layernorm",
     ["--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj", "moe_act",
      "layernorm"]),
    ("full (uniform, 1)", ["--recompute-granularity", "full"]),
]


def command(a, flags, micro_batch, steps, metrics):
    return [a.moet, "train", "--model", a.model, "--data", "mock", "--steps", str(steps),
            "--micro-batch", str(micro_batch), "--seq", str(a.seq), "--threads", str(a.threads),
            "--precision", a.precision, "--peak-tflops", "1", "--eval-batches", "0",
            "--metrics", metrics, "--overwrite", "--log-every", "1"] + flags


def planned_mb(a, flags, micro_batch, metrics):
    """The header's planned total in MB, or None when the run stops before printing it."""
    p = subprocess.Popen(command(a, flags, micro_batch, 1, metrics), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    total = None
    for line in p.stdout:
        m = re.match(r"memory: .*?activations \d+: (\d+) MB", line)
        if m:
            total = float(m.group(1))
            break
    p.kill()
    p.wait()
    return total


def largest(a, flags, metrics):
    budget = a.budget_gib * 1024
    fits = lambda b: (planned_mb(a, flags, b, metrics) or float("inf")) <= budget
    lo, hi = 0, 1
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--moet", default="build/moet")
    p.add_argument("--model", default="configs/bench-dsv3.json")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--budget-gib", type=float, default=21.0)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        for name, flags in VARIANTS:
            b = largest(a, flags, metrics)
            if b == 0:
                rows.append((name, 0, None, None, None))
                continue
            plan = planned_mb(a, flags, b, metrics)
            subprocess.run(command(a, flags, b, a.steps, metrics), check=True,
                           stdout=subprocess.DEVNULL)
            with open(metrics) as f:
                last = [json.loads(line) for line in f][-1]
            rows.append((name, b, plan, last["peak_rss_mb"], last["step_time_s"]))
            print(f"{name}: micro-batch {b}: planned {plan} MB, {last}", file=sys.stderr)
    cpu = cpu_model()
    print(f"{a.model}, --precision {a.precision}, sequences of {a.seq}, budget {a.budget_gib} GiB, "
          f"{a.threads} threads, {cpu}; {a.steps} steps trained at the largest size\n")
    print("| recompute | largest micro-batch (tokens) | planned MB | peak RSS MB | step s |")
    print("|---|---|---|---|---|")
    for name, b, plan, rss, step in rows:
        if b == 0:
            print(f"| {name} | none fits | | | |")
        else:
            print(f"| {name} | {b} x {a.seq} ({b * a.seq}) | {plan:.0f} | {rss:.0f} | {step:.1f} |")


if __name__ == "__main__":
    main()
