"""--precision auto against the faster of fp32 and bf16, side by side (docs/benchmarks.md, "auto
by measurement"): moet train on each config with --precision auto, fp32 and bf16 in rounds that
alternate the runs; prints each run's median tokens/s over the rounds (steps 3..N of each run)
and auto's ratio to the faster of the two. Also what auto chose and why (its header line).
A second binary (--before) adds its runs to the same rounds: the step speed before and after a
change, measured side by side.

usage: python3 bench/auto_recipe.py [--moet build/moet] [--before OLD_MOET]
       [--configs configs/small-bpe.json configs/bench-dsv3.json] [--micro-batch 8] [--seq 256]
       [--steps 8] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--moet", default="build/moet")
ap.add_argument("--before", default="")
ap.add_argument("--configs", nargs="+", default=["configs/small-bpe.json", "configs/bench-dsv3.json"])
ap.add_argument("--micro-batch", type=int, default=8)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--rounds", type=int, default=3)
a = ap.parse_args()

cpu = "unknown CPU"
family = model = ""
for line in open("/proc/cpuinfo"):
    if line.startswith("model name") and cpu == "unknown CPU":
        cpu = line.split(":", 1)[1].strip()
    if line.startswith("cpu family") and not family:
        family = line.split(":", 1)[1].strip()
    if line.startswith("model\t") and not model:
        model = line.split(":", 1)[1].strip()

binaries = [("", a.moet)] + ([("before ", a.before)] if a.before else [])
runs = [(b + p, exe, p) for b, exe in binaries for p in ("auto", "fp32", "bf16")]
with tempfile.TemporaryDirectory() as d:
    for cfg in a.configs:
        rates = {name: [] for name, _, _ in runs}
        header = ""
        for r in range(a.rounds):
            for name, exe, precision in runs:
                metrics = os.path.join(d, "m.jsonl")
                if os.path.exists(metrics):
                    os.remove(metrics)
                out = subprocess.run(
                    [exe, "train", "--model", cfg, "--data", "mock", "--steps", str(a.steps),
                     "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--eval-batches",
                     "0", "--precision", precision, "--log-every", "100", "--metrics", metrics],
                    check=True, capture_output=True, text=True).stdout
                if name == "auto":
                    header = next(l for l in out.splitlines() if l.startswith("precision:"))
                rows = [json.loads(l) for l in open(metrics)][2:]
                rates[name].append(sum(x["tokens_per_s"] for x in rows) / len(rows))
        med = {k: statistics.median(v) for k, v in rates.items()}
        best = max(med["fp32"], med["bf16"])
        print(f"CPU: {cpu} (family {family} model {model}); {cfg}, micro-batch {a.micro_batch} "
              f"x {a.seq}, tokens/s, median of {a.rounds} rounds")
        print(f"auto's header: {header}")
        print("| run | tokens/s | vs the faster of fp32 and bf16 |")
        print("|---|---|---|")
        for name, _, _ in runs:
            print(f"| {name} | {med[name]:.0f} | {med[name] / best:.3f} |")
        print()
