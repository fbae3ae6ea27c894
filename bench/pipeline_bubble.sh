#!/usr/bin/env bash
# The pipeline bubble, measured (docs/benchmarks.md, "Pipeline: the bubble ..."): moet train
# --pp 2 on configs/small.json with 1F1B and interleaved 1F1B over several micro-batch counts
# M. For each run, the median over steps 3.. of:
#   run    the pipeline passes' time (slowest rank);
#   bubble run / the busiest rank's compute − 1, against (P − 1)/(V·M);
#   sched  what the schedule generator (simulate_pipeline, the code `moet simulate` runs)
#          predicts from the same step's measured pass times of every virtual stage.
# Usage: bench/pipeline_bubble.sh [MOET] [STEPS]
set -euo pipefail
moet=${1:-build/moet}
steps=${2:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
train=(train --model "$root/configs/small.json" --steps "$steps" --eval-batches 0 --quiet --seq 256
       --micro-batch 2 --threads 1 --data mock)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 2 ranks x 1 thread"
printf '%-34s %3s %8s %8s %8s %7s %8s %10s\n' layout M step_s run_s sched_s s/run bubble "(P-1)/VM"
for spec in "1 Etttt|ttmL" "2 Et|tt|tt|tmL"; do
  read -r V layout <<<"$spec"
  for M in 4 8 16; do
    "${mpi[@]}" "$moet" "${train[@]}" --pp 2 --vpp "$V" --pp-layout "$layout" --grad-accum "$M" \
      --metrics "$tmp/m.jsonl" --overwrite-metrics
    /usr/bin/python3 - "$tmp/m.jsonl" "$layout" "$V" "$M" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
med = lambda k: statistics.median(r[k] for r in rows)
V, M = int(sys.argv[3]), int(sys.argv[4])
print(f"{'--pp 2 --vpp ' + str(V) + ' ' + sys.argv[2]:34s} {M:3d} {med('step_time_s'):8.3f} "
      f"{med('pp_run_s'):8.3f} {med('pp_schedule_s'):8.3f} "
      f"{med('pp_schedule_s') / med('pp_run_s'):7.3f} {med('pp_bubble'):8.3f} {1 / (V * M):10.3f}")
PY
  done
done
