#!/usr/bin/env bash
# What tracing costs (docs/benchmarks.md, "Tracing overhead"): the step time of configs/small.json
# for a baseline binary (before the trace spans), the current one without --trace, and the
# current one with --trace; single process and 2 ranks (--ep 2). Runs alternate A B C A B C ...
# so the shared machine's drift hits all three alike; the figure is the median over runs of the
# median step time over steps 3.. of each run.
# Usage: bench/trace_overhead.sh BASELINE_MOET [MOET] [ROUNDS] [STEPS]
set -euo pipefail
base=$1
moet=${2:-build/moet}
rounds=${3:-3}
steps=${4:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
train=(train --model "$root/configs/small.json" --data mock --steps "$steps" --seq 256
       --micro-batch 2 --eval-batches 0 --quiet --peak-tflops 1)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
med() {  # median step_time_s over steps 3.. of a metrics file
  /usr/bin/python3 -c 'import json,statistics,sys
r=[json.loads(l)["step_time_s"] for l in open(sys.argv[1])][2:]
print(statistics.median(r))' "$1"
}
for mode in single ep2; do
  if [ $mode = single ]; then
    run=() extra=(--threads 2)
  else
    run=(mpirun --allow-run-as-root --oversubscribe -np 2) extra=(--threads 1 --ep 2)
  fi
  : >"$tmp/a" && : >"$tmp/b" && : >"$tmp/c"
  for r in $(seq "$rounds"); do
    "${run[@]}" "$base" "${train[@]}" "${extra[@]}" --metrics "$tmp/m.jsonl" --overwrite-metrics
    med "$tmp/m.jsonl" >>"$tmp/a"
    "${run[@]}" "$moet" "${train[@]}" "${extra[@]}" --metrics "$tmp/m.jsonl" --overwrite-metrics
    med "$tmp/m.jsonl" >>"$tmp/b"
    rm -f "$tmp"/t*.json
    "${run[@]}" "$moet" "${train[@]}" "${extra[@]}" --metrics "$tmp/m.jsonl" --overwrite-metrics \
      --trace "$tmp/t.json"
    med "$tmp/m.jsonl" >>"$tmp/c"
  done
  /usr/bin/python3 - "$mode" "$tmp/a" "$tmp/b" "$tmp/c" <<'PY'
import statistics, sys
m = [statistics.median(float(x) for x in open(f)) for f in sys.argv[2:]]
print(f"{sys.argv[1]:6s} step_s baseline {m[0]:.4f} | no trace {m[1]:.4f} ({m[1]/m[0]:.3f}x) | "
      f"--trace {m[2]:.4f} ({m[2]/m[0]:.3f}x)")
PY
done
