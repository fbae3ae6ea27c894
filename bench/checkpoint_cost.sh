#!/usr/bin/env bash
# What a checkpoint costs a training step (docs/benchmarks.md#checkpoints): the same run without
# checkpoints, with asynchronous saves (the default) and with --sync-save, side by side; prints
# the mean step time of steps that saved and of steps that did not, save_s (what the step waited
# for), and the write throughput of rank 0.
# Usage: [SEQ=256] [MODES="none async sync"] [EXTRA="--threads 1"] \
#          bench/checkpoint_cost.sh [MOET] [CONFIG] [STEPS] [SAVE_EVERY]
set -euo pipefail
moet="${1:-build/moet}" config="${2:-configs/small.json}" steps="${3:-24}" every="${4:-4}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
common=(train --model "$config" --data mock --micro-batch 4 --seq "${SEQ:-256}" --steps "$steps" --log-every 100000
        --eval-batches 0 --peak-tflops 1 ${EXTRA:-})
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $config, 4 x ${SEQ:-256}, $steps steps, a save every $every ${EXTRA:-}"
for mode in ${MODES:-none async sync}; do
  extra=()
  [ "$mode" != none ] && extra=(--out "$dir/$mode" --save-every "$every")
  [ "$mode" = sync ] && extra+=(--sync-save)
  "$moet" "${common[@]}" "${extra[@]}" --metrics "$dir/$mode.jsonl" >"$dir/$mode.out"
done
python3 - "$dir" "$every" <<'PY'
import json, sys, os, statistics as st
d, every = sys.argv[1], int(sys.argv[2])
def load(m): return [json.loads(l) for l in open(f"{d}/{m}.jsonl")][2:]  # warm-up left out
def total(rows): return sum(r["step_time_s"] + (r.get("save_s") or 0) for r in rows)
none = load("none")
base = st.median(r["step_time_s"] for r in none)
print("| mode | median step, no save (s) | median save_s: the step waits (s) | loop time per step (s) | cost per save (s) |")
print("|---|---|---|---|---|")
print(f"| no checkpoints | {base:.3f} | – | {total(none) / len(none):.3f} | – |")
for m in ("async", "sync"):
    rows = load(m)
    saves = [r["save_s"] for r in rows if r.get("save_s") is not None]
    plain = [r["step_time_s"] for r in rows if r.get("save_s") is None]
    # an async write overlaps the steps after it: the loop's extra time over all steps, per save
    cost = (total(rows) - total(none)) / max(1, len(saves))
    print(f"| {m} | {st.median(plain):.3f} | {st.median(saves):.3f} | "
          f"{total(rows) / len(rows):.3f} | {cost:.3f} |")
for m in ("async", "sync"):
    line = [l for l in open(f"{d}/{m}.out") if l.startswith("checkpoint:")]
    print(f"{m}: {line[-1].strip() if line else 'no checkpoint line'}")
PY
