"""The recipes' step times through each GEMM path, side by side (docs/benchmarks.md, "FP8
recipes through fp32 GEMMs"): fp32 training, and bf16 / MXFP8 / FP8-blockwise with their
operands multiplied by fp32 sgemm (MOET_NO_BF16_GEMM=1: the path `moet train` picks where fp32
GEMMs are the faster, as on an Intel Xeon without AMX) and by bf16 GEMMs (where the CPU has
them), in rounds that alternate the runs. Prints the median over rounds of each run's mean step
time (steps 3..N) and its ratio to fp32's.

usage: python3 bench/recipe_gemm_paths.py [--moet build/moet] [--model configs/small-bpe.json]
       [--micro-batch 8] [--seq 256] [--steps 8] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--moet", default="build/moet")
ap.add_argument("--model", default="configs/small-bpe.json")
ap.add_argument("--micro-batch", type=int, default=8)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--rounds", type=int, default=3)
a = ap.parse_args()

cpu = "unknown CPU"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
flags = open("/proc/cpuinfo").read()
has_bf16 = "avx512_bf16" in flags or "amx_bf16" in flags

runs = [("fp32", "fp32", {})]
for p in ("bf16", "mxfp8", "fp8-blockwise"):
    runs.append((p + " via fp32 GEMMs", p, {"MOET_NO_BF16_GEMM": "1"}))
    if has_bf16:
        runs.append((p + " via bf16 GEMMs", p, {"MOET_BF16_OPERANDS": "1"}))

times = {name: [] for name, _, _ in runs}
with tempfile.TemporaryDirectory() as d:
    for r in range(a.rounds):
        for name, precision, env in runs:
            metrics = os.path.join(d, "m.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            subprocess.run(
                [a.moet, "train", "--model", a.model, "--data", "mock", "--steps", str(a.steps),
                 "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--eval-batches", "0",
                 "--precision", precision, "--quiet", "--peak-tflops", "1", "--metrics", metrics],
                check=True, env={**os.environ, **env})
            rows = [json.loads(l) for l in open(metrics)][2:]
            times[name].append(sum(x["step_time_s"] for x in rows) / len(rows))

print(f"CPU: {cpu}; {a.model}, micro-batch {a.micro_batch} x {a.seq}, mean of steps 3-{a.steps}, "
      f"median of {a.rounds} rounds")
print("| run | s/step | vs fp32 |")
print("|---|---|---|")
base = statistics.median(times["fp32"])
for name, _, _ in runs:
    t = statistics.median(times[name])
    print(f"| {name} | {t:.3f} | {t / base:.3f} |")
