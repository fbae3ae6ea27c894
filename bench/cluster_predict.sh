#!/usr/bin/env bash
# The performance model against runs on the emulated cluster (root; docs/benchmarks.md,
# "Performance model vs the emulated cluster"). `moet bench --ranks-per-node 1 --link-gbps G`
# describes this machine as the cluster of scripts/cluster.sh: 2 nodes of 1 rank, joined by a
# link of G GB/s each way (default 0.367, what bench/cluster_links.sh measured under the
# 3000 Mbit/s cap). Each round calibrates, runs configs/small.json on the cluster in three
# layouts (data parallel with the gradient reduction exposed, the same with it overlapped, and
# --ep 2 with nothing overlapped), and calibrates again; each run is predicted by `moet
# simulate --system` with the mean of the two calibrations, against its fastest step after
# the first two.
# Usage: sudo bench/cluster_predict.sh [MOET] [ROUNDS] [LINK_GBPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
moet=$(realpath "${1:-$root/build/moet}")
rounds=${2:-2}
link=${3:-0.367}
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"; "$root/scripts/cluster.sh" down >/dev/null 2>&1 || true' EXIT
small=$root/configs/small.json
cluster=("$root/scripts/cluster.sh" run --nodes 2 --ranks-per-node 1 --)
train=(train --model "$small" --steps 8 --eval-batches 0 --quiet --seq 256 --micro-batch 4
       --threads 1 --data mock --ep-ranks-per-node 1 --overwrite-metrics --precision fp32)
sim=(--gpus 2 --mbs 4 --gbs 8 --seq 256 --precision fp32 --no-a2a-overlap
     --no-distributed-optimizer --json)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 2 nodes x 1 rank x 1 thread"
"$root/scripts/cluster.sh" up --nodes 2 >/dev/null
calibrate() { "$moet" bench --ranks-per-node 1 --link-gbps "$link" --out "$1" --overwrite >/dev/null; }
predict() {  # SYSTEM FLAGS...
  local system=$1
  shift
  "$moet" simulate --model "$small" --system "$system" "${sim[@]}" "$@" 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["step_time_s"])'
}
fastest() {
  /usr/bin/python3 -c 'import json,sys; print(min(json.loads(l)["step_time_s"] for l in list(open(sys.argv[1]))[2:]))' "$1"
}
calibrate "$tmp/cal0.json"
: >"$tmp/rows"
for r in $(seq "$rounds"); do
  "${cluster[@]}" "$moet" "${train[@]}" --overlap off --metrics "$tmp/dp_off.jsonl"
  "${cluster[@]}" "$moet" "${train[@]}" --overlap on --metrics "$tmp/dp_on.jsonl"
  "${cluster[@]}" "$moet" "${train[@]}" --ep 2 --overlap off --metrics "$tmp/ep.jsonl"
  calibrate "$tmp/cal$r.json"
  for run in "dp_off --no-dp-overlap" "dp_on" "ep --ep 2 --no-dp-overlap"; do
    read -r name flags <<<"$run"
    # shellcheck disable=SC2086
    b=$(predict "$tmp/cal$((r - 1)).json" $flags)
    # shellcheck disable=SC2086
    a=$(predict "$tmp/cal$r.json" $flags)
    echo "$r $name $b $a $(fastest "$tmp/$name.jsonl")" >>"$tmp/rows"
  done
done
/usr/bin/python3 - "$tmp/rows" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, name, b, a, measured = line.split()
    p = (float(b) + float(a)) / 2
    runs.setdefault(name, []).append(p / float(measured))
    print(f"round {r} {name:6s}: predicted {p:.3f} s (calibrations {float(b):.3f}, {float(a):.3f}),"
          f" measured {float(measured):.3f} s, ratio {p / float(measured):.2f}")
for name, ratios in runs.items():
    print(f"{name}: median predicted / measured {statistics.median(ratios):.2f} over {len(ratios)} rounds")
PY
