#!/usr/bin/env bash
# The performance model against moet's own measured CPU runs: calibrate this machine with
# `moet bench`, train configs/small.json (one process, and mpirun -np 2 --ep 2), predict both
# step times with `moet simulate --system local`, and require them within 20% of the measured
# steps. The machine is shared and a neighbour only ever slows work down, so both sides are
# the undisturbed speed: bench keeps each kernel's best call (from cold caches), and a run's
# measured step is its fastest after the first two. The machine's speed also drifts over
# minutes, so the check runs 3 rounds (calibrate, train one process, train two ranks), with a
# last calibration after them; each run is predicted with the mean of the calibrations before
# and after it, and the median ratio predicted / measured over the rounds must lie in
# [0.8, 1.2].
# Usage: sim_local_check.sh MOET SOURCE_DIR MPIEXEC [MPIEXEC FLAGS...]
set -euo pipefail
moet=$1
root=$2
shift 2
mpi=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=$root/configs/small.json
train=(train --model "$small" --steps 8 --eval-batches 0 --quiet --overwrite-metrics)
rounds=3

stat() {  # stat FILE FIELD min|median: over the steps after the first two
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, statistics, sys
rows = [json.loads(l)[sys.argv[2]] for l in open(sys.argv[1])][2:]
print(min(rows) if sys.argv[3] == "min" else statistics.median(rows))
PY
}
predict() {  # predict SYSTEM_FILE FLAGS...: predicted step seconds
  local system=$1
  shift
  "$moet" simulate --model "$small" --system "$system" --seq 256 --mbs 8 \
    --precision fp32 --no-a2a-overlap --no-dp-overlap --no-distributed-optimizer --json "$@" \
    2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["step_time_s"])'
}

"$moet" bench --out "$tmp/cal0.json" --overwrite >/dev/null
for r in $(seq 1 $rounds); do
  "$moet" "${train[@]}" --metrics "$tmp/one$r.jsonl"
  "${mpi[@]}" 2 "$moet" "${train[@]}" --ep 2 --metrics "$tmp/two$r.jsonl"
  "$moet" bench --out "$tmp/cal$r.json" --overwrite >/dev/null
done

: >"$tmp/ratios"
for r in $(seq 1 $rounds); do
  before=$tmp/cal$((r - 1)).json
  after=$tmp/cal$r.json
  imbalance=$(stat "$tmp/two$r.jsonl" ep_load_imbalance median)
  two=(--gpus 2 --ep 2 --gbs 16 --expert-imbalance "$imbalance")
  echo "$r one $(predict "$before" --gpus 1 --gbs 8) $(predict "$after" --gpus 1 --gbs 8)" \
    "$(stat "$tmp/one$r.jsonl" step_time_s min)" >>"$tmp/ratios"
  echo "$r two $(predict "$before" "${two[@]}") $(predict "$after" "${two[@]}")" \
    "$(stat "$tmp/two$r.jsonl" step_time_s min) $imbalance" >>"$tmp/ratios"
done
/usr/bin/python3 - "$tmp/ratios" <<'PY'
import statistics, sys
runs = {"one": [], "two": []}
for line in open(sys.argv[1]):
    r, run, p_before, p_after, measured, *imb = line.split()
    p = (float(p_before) + float(p_after)) / 2
    ratio = p / float(measured)
    runs[run].append(ratio)
    extra = f", expert imbalance {float(imb[0]):.2f}" if imb else ""
    print(f"round {r} {run:3s}: predicted {p:.3f} s, measured {float(measured):.3f} s, "
          f"ratio {ratio:.2f}{extra}")
ok = True
for run, label in (("one", "one process"), ("two", "mpirun -np 2 --ep 2")):
    m = statistics.median(runs[run])
    print(f"{label}: median predicted / measured {m:.2f}")
    ok &= 0.8 <= m <= 1.2
sys.exit(0 if ok else 1)
PY
