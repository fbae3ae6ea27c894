#!/usr/bin/env python3
"""Activation recomputation measured side by side (docs/training.md, "Memory"): `moet train` with
no recomputation, each selective module alone, Megatron's MoE set (mla_up_proj moe_act
layernorm) and full, in turn, ROUNDS rounds; per variant what the header states (all the
activation arenas hold, the part kept from forward to backward, what is made again and the
region it shares), the peak resident set (`peak_rss_mb`) and the median step time (steps after
the first), with step-time ratios to a run of none just before each variant.

usage: python3 bench/recompute_table.py [--moet build/moet] [--model configs/bench-dsv3.json]
           [--precision fp32] [--micro-batch 4] [--seq 512] [--steps 4] [--rounds 2]
           [--threads 2] [--only VARIANT...]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from cpu import cpu_model

VARIANTS = [
    ("none", []),
    ("core_attn", ["selective", "core_attn"]),
    ("mla_up_proj", ["selective", "mla_up_proj"]),
    ("moe_act", ["selective", "moe_act"]),
    ("layernorm", ["selective", "layernorm"]),
    ("mlp", ["selective", "mlp"]),
    ("shared_experts", ["selective", "shared_experts"]),
    ("moe", ["selective", "moe"]),
    ("mla_up_proj moe_act layernorm", ["selective", "mla_up_proj", "moe_act", "layernorm"]),
    ("full (uniform, 1)", ["full"]),
]


def run(a, flags, metrics):
    cmd = [a.moet, "train", "--model", a.model, "--data", "mock", "--steps", str(a.steps),
           "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--threads", str(a.threads),
           "--precision", a.precision, "--peak-tflops", "1", "--eval-batches", "0",
           "--metrics", metrics, "--overwrite", "--log-every", str(a.steps)]
    if flags:
        cmd += ["--recompute-granularity", flags[0]]
        if len(flags) > 1:
            cmd += ["--recompute-modules"] + flags[1:]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    act = float(re.search(r"activations (\d+):", out).group(1))
    kept = float(re.search(r"^activations: ([\d.]+) MB kept", out, re.M).group(1))
    saved = re.search(r"^recompute: .*: ([\d.]+) MB of activations .* sharing a ([\d.]+) MB "
                      r"region: saves ([\d.]+) MB$", out, re.M)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    times = [r["step_time_s"] for r in rows[1:]]
    return {"act": act, "kept": kept, "recomputed": float(saved.group(1)) if saved else 0.0,
            "region": float(saved.group(2)) if saved else 0.0,
            "step": statistics.median(times), "rss": rows[-1]["peak_rss_mb"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--moet", default="build/moet")
    p.add_argument("--model", default="configs/bench-dsv3.json")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", nargs="+", metavar="VARIANT",
                   help="these variants (names as in the table's first column) besides none")
    a = p.parse_args()
    variants = [v for v in VARIANTS if not a.only or v[0] == "none" or v[0] in a.only]
    if a.only and len(variants) != len(set(a.only) | {"none"}):
        sys.exit("--only: unknown variant; the variants are: " + ", ".join(n for n, _ in VARIANTS))
    results = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        for r in range(a.rounds):
            for name, flags in variants:
                # each variant's time against a run of none just before it: the shared machine's
                # speed drifts over minutes
                base = run(a, [], metrics)
                x = base if name == "none" else run(a, flags, metrics)
                x["time_ratio"] = x["step"] / base["step"]
                x["act_ratio"] = x["act"] / base["act"]
                x["kept_ratio"] = x["kept"] / base["kept"]
                results[name].append(x)
                print(f"round {r + 1} {name}: {x}", file=sys.stderr)
    cpu = cpu_model()
    print(f"{a.model}, --precision {a.precision}, micro-batch {a.micro_batch} x seq {a.seq}, "
          f"{a.threads} threads, {cpu}; medians of {a.rounds} rounds\n")
    print("| recompute | activations MB (of none) | kept MB (of none) | made again MB | "
          "shared region MB | peak RSS MB | step s (of none) |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in variants:
        xs = results[name]
        med = lambda k: statistics.median(x[k] for x in xs)
        print(f"| {name} | {med('act'):.0f} ({100 * med('act_ratio'):.0f}%) | "
              f"{med('kept'):.0f} ({100 * med('kept_ratio'):.0f}%) | {med('recomputed'):.0f} | {med('region'):.0f} | {med('rss'):.0f} | "
              f"{med('step'):.2f} ({med('time_ratio'):.2f}x) |")


if __name__ == "__main__":
    main()
