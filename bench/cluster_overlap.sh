#!/usr/bin/env bash
# Overlap on the emulated cluster (docs/benchmarks.md, "Overlap on the emulated cluster"; root):
# configs/small.json on 2 "nodes" (network namespaces whose link is capped at 3000 Mbit/s by
# tc tbf, about 10 : 1 against shared memory, docs/cluster.md), one rank per node, so every
# collective crosses the capped link. Each configuration runs STEPS steps; the median step time
# over steps 3.. is reported with the communication time and the part of it not hidden:
#   dp        data parallelism: gradient reduction with --overlap off, then on (a communication
#             thread reduces each block's gradients during the backward);
#   ep        --ep 2: the experts' all-to-all with --overlap off, then on (shared expert and
#             router backward under it), then --a2a-overlap (the micro-batch split in two
#             halves whose exchanges travel under each other's compute);
#   pp        --pp 2, a stage per node (activations and gradients cross the link): the
#             pipeline's time, the schedule's prediction from the measured passes, the bubble
#             against (P-1)/(V*M) = 0.125 (1F1B, M 8) and 0.0625 (V 2).
# Then combined 1F1B (--a2a-overlap under --pp) on 4 nodes of 1 rank: --pp 2 --ep 2, so both
# the stages' messages and each stage's expert all-to-all cross the link (4 ranks on the
# machine's cores).
# Then node-limited routing (--ep 2, a node per expert group of the config's n_group): bytes
# that leave the node per step with topk_group = 1 (each token's experts on one node) against
# topk_group = n_group (unlimited).
# Usage: sudo bench/cluster_overlap.sh [MOET] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
moet=$(realpath "${1:-$root/build/moet}")
steps=${2:-6}
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"; "$root/scripts/cluster.sh" down >/dev/null 2>&1 || true' EXIT
cluster=("$root/scripts/cluster.sh" run --nodes 2 --ranks-per-node 1 --)
base=(train --steps "$steps" --eval-batches 0 --quiet --seq 256
      --threads 1 --data mock --ep-ranks-per-node 1)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 2 nodes x 1 rank x 1 thread"
"$root/scripts/cluster.sh" up --nodes 2 >/dev/null
summary() {  # FILE LABEL
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
med = lambda k: statistics.median(r.get(k, 0) or 0 for r in rows)
comm = med("grad_sync_s") + med("a2a_s")
exposed = med("exposed_comm_s")
hidden = 1 - exposed / comm if comm > 0 else 0
if "pp_run_s" in rows[0]:
    print(f"{sys.argv[2]:44s} step {med('step_time_s'):6.3f} s | pipeline {med('pp_run_s'):6.3f} s, "
          f"schedule's prediction {med('pp_schedule_s'):6.3f} s | bubble {med('pp_bubble'):.3f} | "
          f"comm {comm:6.3f} s, exposed {exposed:6.3f} s ({100 * hidden:3.0f}% hidden)")
else:
    print(f"{sys.argv[2]:44s} step {med('step_time_s'):6.3f} s | comm {comm:6.3f} s, exposed "
          f"{exposed:6.3f} s ({100 * hidden:3.0f}% hidden) | {med('comm_bytes') / 1e6:7.1f} MB sent, "
          f"{med('comm_bytes_other_nodes') / 1e6:7.1f} MB across nodes")
PY
}
run() {  # LABEL ARGS...
  local label=$1
  shift
  "${cluster[@]}" "$moet" "${base[@]}" --model "$root/configs/small.json" "$@" \
    --metrics "$tmp/m.jsonl" --overwrite-metrics
  summary "$tmp/m.jsonl" "$label"
}
run "dp: gradient sync, --overlap off" --overlap off --micro-batch 4
run "dp: gradient sync, --overlap on" --overlap on --micro-batch 4
run "ep 2: all-to-all, --overlap off" --ep 2 --overlap off --micro-batch 4
run "ep 2: all-to-all, --overlap on" --ep 2 --overlap on --micro-batch 4
run "ep 2: --overlap on --a2a-overlap (split)" --ep 2 --overlap on --a2a-overlap --micro-batch 4
run "pp 2, 1F1B, M 8" --pp 2 --pp-layout "Etttt|ttmL" --micro-batch 2 --grad-accum 8
run "pp 2 vpp 2, interleaved, M 8" --pp 2 --vpp 2 --pp-layout "Et|tt|tt|tmL" --micro-batch 2 \
  --grad-accum 8

# node-limited routing: n_group = 2 groups of 16 experts, one per node
for k in 1 2; do
  /usr/bin/python3 - "$root/configs/small.json" "$tmp/small_g$k.json" "$k" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["n_group"], c["topk_group"] = 2, int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
  chmod 644 "$tmp/small_g$k.json"
  "${cluster[@]}" "$moet" "${base[@]}" --model "$tmp/small_g$k.json" --ep 2 --overlap on \
    --micro-batch 4 --metrics "$tmp/m.jsonl" --overwrite-metrics
  summary "$tmp/m.jsonl" "ep 2, n_group 2, topk_group $k"
done

# combined 1F1B: 4 nodes, a stage's two expert-parallel ranks on different nodes
"$root/scripts/cluster.sh" down >/dev/null
"$root/scripts/cluster.sh" up --nodes 4 >/dev/null
cluster=("$root/scripts/cluster.sh" run --nodes 4 --ranks-per-node 1 --)
for overlap in "" "--a2a-overlap"; do
  # shellcheck disable=SC2086
  run "pp 2 ep 2 (4 nodes), --overlap on ${overlap:-(no a2a overlap)}" --pp 2 --ep 2 \
    --pp-layout "Etttt|ttmL" --micro-batch 2 --grad-accum 8 --overlap on $overlap
done
