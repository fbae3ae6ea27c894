"""The recipes' step times side by side (docs/benchmarks.md, "The FP4 recipes' step"): `moet
train` in each recipe on the same model and batch, in rounds that alternate the runs, so a busy
machine slows them alike. Prints the median over rounds of each run's mean step time (steps 3..N)
and its ratio to the first run's (bf16 by default).

usage: python3 bench/recipe_steps.py [--moet build/moet] [--model configs/bench-dsv3.json]
       [--micro-batch 16] [--seq 256] [--steps 6] [--rounds 3]
       [--runs bf16 mxfp8 nvfp4 mxfp4 nvfp4:0]   (RECIPE[:BF16_LAYERS])
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--moet", default="build/moet")
ap.add_argument("--model", default="configs/bench-dsv3.json")
ap.add_argument("--micro-batch", type=int, default=16)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--runs", nargs="+", default=["bf16", "mxfp8", "nvfp4", "mxfp4", "nvfp4:0"])
a = ap.parse_args()

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown CPU")
times = {r: [] for r in a.runs}
with tempfile.TemporaryDirectory() as d:
    for _ in range(a.rounds):
        for run in a.runs:
            recipe, _, layers = run.partition(":")
            metrics = os.path.join(d, "m.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            extra = ["--bf16-layers", layers] if layers else []
            subprocess.run(
                [a.moet, "train", "--model", a.model, "--data", "mock", "--steps", str(a.steps),
                 "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--eval-batches", "0",
                 "--precision", recipe, "--quiet", "--peak-tflops", "1", "--metrics", metrics]
                + extra, check=True)
            rows = [json.loads(l) for l in open(metrics)][2:]
            times[run].append(sum(x["step_time_s"] for x in rows) / len(rows))

print(f"CPU: {cpu}; {a.model}, micro-batch {a.micro_batch} x {a.seq}, mean of steps 3-{a.steps}, "
      f"median of {a.rounds} rounds (RECIPE:N = --bf16-layers N; else the default 1)")
print(f"| run | s/step | vs {a.runs[0]} |")
print("|---|---|---|")
base = statistics.median(times[a.runs[0]])
for run in a.runs:
    t = statistics.median(times[run])
    print(f"| {run} | {t:.3f} | {t / base:.3f} |")
