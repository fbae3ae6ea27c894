#!/usr/bin/env bash
# The pipeline schedules on the emulated cluster (docs/benchmarks.md, "Pipeline schedules on the
# emulated cluster"; root): configs/small.json with --pp 2 --ep 2 on 4 "nodes" of one rank
# (network namespaces whose links are capped by tc tbf at RATE Mbit/s, docs/cluster.md), so both
# the stages' messages and each stage's expert all-to-all cross a link, and the all-to-all is a
# large part of the step. Each schedule runs STEPS steps of 8 micro-batches of 2 sequences over
# the same 4 virtual stages (Et|tt|tt|tmL); the median over steps 3.. of the step, the pipeline's
# passes, the expert all-to-all, the part of it nothing hid, all communication not hidden (the
# all-to-all's, the gradient reduction's and the pipeline's waits) and the bubble:
#   interleaved  --vpp 2 with --a2a-overlap: Megatron's combined 1F1B
#   zbv          the zero-bubble V (no overlapped passes)
#   dualpipev    DeepSeek's DualPipeV, its forward & backward pairs overlapped
#   interleaved without the all-to-all overlap, as the reference for what the overlaps hide;
#   +delay       the combined passes with --delay-wgrad-compute (each backward stage's weight
#                gradients under the exchanges it and the forward's stage started).
# Usage: sudo bench/cluster_schedules.sh [MOET] [STEPS] [RATE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
moet=$(realpath "${1:-$root/build/moet}")
steps=${2:-6}
rate=${3:-1000}
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"; "$root/scripts/cluster.sh" down >/dev/null 2>&1 || true' EXIT
"$root/scripts/cluster.sh" up --nodes 4 --rate "$rate" >/dev/null
cluster=("$root/scripts/cluster.sh" run --nodes 4 --ranks-per-node 1 --)
base=(train --model "$root/configs/small.json" --steps "$steps" --eval-batches 0 --quiet
      --seq 256 --threads 1 --data mock --ep-ranks-per-node 1 --pp 2 --ep 2 --micro-batch 2
      --grad-accum 8 --pp-layout "Et|tt|tt|tmL" --overlap on)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 4 nodes x 1 rank x 1 thread," \
  "links $rate Mbit/s"
printf '%-24s %7s %7s %7s %11s %10s %7s %8s\n' schedule step_s pp_s a2a_s a2a_exposed comm_exposed \
  bubble a2a/step
for spec in "interleaved+combined --vpp 2 --a2a-overlap" "zbv --pipeline-schedule zbv" \
  "dualpipev --pipeline-schedule dualpipev --a2a-overlap" "interleaved --vpp 2" \
  "interleaved+combined+delay --vpp 2 --a2a-overlap --delay-wgrad-compute" \
  "dualpipev+delay --pipeline-schedule dualpipev --a2a-overlap --delay-wgrad-compute"; do
  read -ra a <<<"$spec"
  "${cluster[@]}" "$moet" "${base[@]}" "${a[@]:1}" --metrics "$tmp/m.jsonl" --overwrite-metrics
  /usr/bin/python3 - "$tmp/m.jsonl" "${a[0]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
med = lambda k: statistics.median(r.get(k, 0) or 0 for r in rows)
print(f"{sys.argv[2]:24s} {med('step_time_s'):7.3f} {med('pp_run_s'):7.3f} {med('a2a_s'):7.3f} "
      f"{med('a2a_exposed_s'):11.3f} {med('exposed_comm_s'):10.3f} {med('pp_bubble'):7.3f} "
      f"{med('a2a_s') / med('step_time_s'):8.2f}")
PY
done
