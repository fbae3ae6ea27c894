#!/usr/bin/env python3
"""Two moet binaries' per-op profiles side by side (docs/benchmarks.md): `moet bench --model`
of each binary in turn, ROUNDS rounds, every precision; the medians of the step time, of the
standalone conversions' share (`quantize …` rows), of attention's GFLOP/s and of each
memory-bound op's GB/s against the STREAM triad measured in the same run.

usage: python3 bench/op_profile_pair.py BASE_MOET NEW_MOET [--model configs/small.json]
           [--precisions fp32,bf16,mxfp8,fp8-blockwise] [--micro-batch 4] [--seq 256]
           [--rounds 3] [--steps 3] [--warmup 1]
BASE_MOET is e.g. a build of an earlier commit: git worktree add /tmp/base COMMIT && cmake -S
/tmp/base -B /tmp/base/build && cmake --build /tmp/base/build --target moet.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def profile(moet, a, precision, path):
    cmd = [moet, "bench", "--model", a.model, "--precision", precision, "--micro-batch",
           str(a.micro_batch), "--seq", str(a.seq), "--steps", str(a.steps), "--warmup",
           str(a.warmup), "--json", path, "--overwrite"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def summary(p):
    ops = {o["op"]: o for o in p["ops"]}
    quantize = sum(o["share"] for name, o in ops.items() if name.startswith("quantize"))
    att = {k: ops[k]["gflops"] for k in ("attention fwd", "attention bwd") if k in ops}
    triad = p.get("stream", {}).get("triad_gbps", 0)
    mem = {name: o["gbps"] / triad for name, o in ops.items()
           if o.get("gbps", 0) > 0 and o.get("gflops", 0) == 0 and triad > 0}
    return {"step": p["step_s"], "quantize": quantize, "attention": att, "mem": mem,
            "triad": triad, "weights": ops.get("weight operands", {}).get("share", 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--model", default="configs/small.json")
    ap.add_argument("--precisions", default="fp32,bf16,mxfp8,fp8-blockwise")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    precisions = a.precisions.split(",")
    runs = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for p in precisions:
                for side, moet in (("base", a.base), ("new", a.new)):
                    s = summary(profile(moet, a, p, os.path.join(d, "p.json")))
                    runs.setdefault((p, side), []).append(s)
                    print(f"round {r + 1} {p} {side}: step {s['step']:.3f} s", file=sys.stderr)
    med = statistics.median
    print(f"{a.model}, micro-batch {a.micro_batch} x {a.seq}; medians of {a.rounds} rounds\n")
    print("| precision | step base (s) | step new (s) | new/base | quantize share base | "
          "new | weight operands base | new | attention fwd/bwd GFLOP/s base | new |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in precisions:
        b, n = runs[(p, "base")], runs[(p, "new")]
        sb, sn = med(x["step"] for x in b), med(x["step"] for x in n)

        def att(xs):
            f = med(x["attention"].get("attention fwd", 0) for x in xs)
            w = med(x["attention"].get("attention bwd", 0) for x in xs)
            return f"{f:.0f} / {w:.0f}"

        print(f"| {p} | {sb:.3f} | {sn:.3f} | {sn / sb:.2f}× | "
              f"{100 * med(x['quantize'] for x in b):.1f}% | "
              f"{100 * med(x['quantize'] for x in n):.1f}% | "
              f"{100 * med(x['weights'] for x in b):.1f}% | "
              f"{100 * med(x['weights'] for x in n):.1f}% | {att(b)} | {att(n)} |")
    print("\nmemory-bound ops of the new binary, GB/s as a share of the STREAM triad "
          "measured in the same profile (median):\n")
    names = sorted({k for p in precisions for x in runs[(p, "new")] for k in x["mem"]})
    print("| op | " + " | ".join(precisions) + " |")
    print("|---|" + "---|" * len(precisions))
    for name in names:
        cells = []
        for p in precisions:
            v = [x["mem"][name] for x in runs[(p, "new")] if name in x["mem"]]
            cells.append(f"{100 * med(v):.0f}%" if v else "–")
        print(f"| {name} | " + " | ".join(cells) + " |")
    tri = med(x["triad"] for p in precisions for x in runs[(p, "new")])
    print(f"\nSTREAM triad (median over the new binary's profiles): {tri:.1f} GB/s")


if __name__ == "__main__":
    main()
