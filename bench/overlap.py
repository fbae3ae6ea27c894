#!/usr/bin/env python3
"""Communication overlap with expert parallelism on this machine (docs/benchmarks.md).

usage: bench/overlap.py [--np 2] [--ep 2] [--model configs/small.json] [--micro-batch 4]
                        [--seq 256] [--steps 8] [--warmup 2] [--rounds 2]

Runs `mpirun -np NP moet train --ep EP` with `--overlap on --a2a-overlap` (communication thread
and split micro-batches), `--overlap on` (the thread) and `--overlap off`, alternating, and prints per-step means after the warm-up steps: step time, time in
the expert all-to-alls (a2a_s), communication not hidden behind compute (exposed_comm_s),
gradient reduction time, and the share of the all-to-all time hidden.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(a, mode):
    """mode: "off", "on" (communication thread), "split" (thread + --a2a-overlap)."""
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.np),
               os.path.join(ROOT, "build", "moet"), "train", "--model", a.model, "--data", "mock",
               "--steps", str(a.steps), "--micro-batch", str(a.micro_batch), "--seq", str(a.seq),
               "--ep", str(a.ep), "--threads", "1", "--eval-batches", "0", "--metrics", m,
               "--peak-tflops", "0.1", "--overlap", "off" if mode == "off" else "on"] + (
                   ["--a2a-overlap"] if mode == "split" else [])
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        rows = [json.loads(l) for l in open(m)][a.warmup:]
    mean = lambda k: statistics.mean(r[k] for r in rows)
    return {k: mean(k) for k in ("step_time_s", "a2a_s", "exposed_comm_s", "a2a_exposed_s",
                                 "grad_sync_s", "comm_bytes", "grad_sync_bytes")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--model", default=os.path.join(ROOT, "configs", "small.json"))
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    modes = ("split", "on", "off")
    res = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m in modes:
            res[m].append(run(a, m))
    print("| overlap | step s | a2a s | exposed comm s (a2a part) | grad sync s | MB sent/step "
          "| a2a hidden | all comm hidden |")
    print("|---|---|---|---|---|---|---|---|")
    names = {"split": "on + --a2a-overlap", "on": "on", "off": "off"}
    for ov in modes:
        r = {k: statistics.median(x[k] for x in res[ov]) for k in res[ov][0]}
        hidden = max(0.0, 1 - r["exposed_comm_s"] / (r["a2a_s"] + r["grad_sync_s"]))
        a2a_hidden = max(0.0, 1 - r["a2a_exposed_s"] / r["a2a_s"])
        print(f"| {names[ov]} | {r['step_time_s']:.3f} | {r['a2a_s']:.3f} | "
              f"{r['exposed_comm_s']:.3f} ({r['a2a_exposed_s']:.3f}) | {r['grad_sync_s']:.3f} | "
              f"{(r['comm_bytes'] - r['grad_sync_bytes']) / 1e6:.1f} | {100 * a2a_hidden:.0f}% | {100 * hidden:.0f}% |")
    print(f"\nmpirun -np {a.np} --ep {a.ep}, {os.path.basename(a.model)}, micro-batch "
          f"{a.micro_batch} x {a.seq}, 1 thread per rank, median of {a.rounds} rounds of "
          f"{a.steps - a.warmup} steps")


if __name__ == "__main__":
    main()
