#!/usr/bin/env bash
# Each pipeline rank's idle time against its schedule's bubble formula and against a replay of
# the same step's passes (docs/benchmarks.md, "Pipeline idle time per rank"): moet train --pp 2
# on a variant of configs/small.json whose stages cost the same (8 dense layers, no MTP, a
# 32-token vocabulary: the embedding and the head are negligible beside a layer), under 1F1B,
# zb1p and dualpipev, M micro-batches of 2 x 256 tokens, 1 thread per rank. From the last
# step's metrics: the mean F, B (a whole backward) and W of one virtual stage, the formula
# (pp_idle_formula_s) and each rank's idle time (pp_idle_s); from its trace, each rank's idle
# time when bench/pipeline_replay.py replays the passes with their measured compute, and when it
# replays them with every pass at its kind's mean (equal stages, as the formula assumes).
# Usage: bench/pipeline_idle.sh [MOET] [STEPS]
set -euo pipefail
moet=${1:-build/moet}
steps=${2:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$root/configs/small.json" "$tmp/equal.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(num_hidden_layers=8, first_k_dense_replace=8, num_nextn_predict_layers=0, vocab_size=32)
json.dump(c, open(sys.argv[2], "w"))
PY
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
train=(train --model "$tmp/equal.json" --steps "$steps" --eval-batches 0 --quiet --seq 256
       --micro-batch 2 --threads 1 --data mock)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; 2 ranks x 1 thread"
printf '%-10s %3s %6s %6s %6s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n' schedule M F_ms B_ms W_ms \
  form_ms idle0_ms idle1_ms replay0 replay1 equal0 equal1 r0/form r1/form
for M in 4 8; do
  for spec in "1f1b line Etttt|ttttL" "zb1p line Etttt|ttttL" "dualpipev v Ett|tt|tt|ttL"; do
    read -r sch placement layout <<<"$spec"
    flags=(--pp 2 --pp-layout "$layout" --grad-accum "$M")
    [ "$sch" = 1f1b ] || flags+=(--pipeline-schedule "$sch")
    rm -f "$tmp"/t.rank*.json
    "${mpi[@]}" "$moet" "${train[@]}" "${flags[@]}" --metrics "$tmp/m.jsonl" --overwrite-metrics \
      --trace "$tmp/t.json"
    replay=$(/usr/bin/python3 "$root/bench/pipeline_replay.py" --placement "$placement" \
      "$tmp/t.rank0.json" "$tmp/t.rank1.json")
    equal=$(/usr/bin/python3 "$root/bench/pipeline_replay.py" --placement "$placement" --equal \
      "$tmp/t.rank0.json" "$tmp/t.rank1.json")
    /usr/bin/python3 - "$tmp/m.jsonl" "$sch" "$M" "$replay" "$equal" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][-1]
idle, form = m["pp_idle_s"], m["pp_idle_formula_s"]
rep = [float(x) for x in sys.argv[4].split()]
eq = [float(x) for x in sys.argv[5].split()]
ms = lambda x: f"{1e3 * x:8.1f}"
print(f"{sys.argv[2]:10s} {int(sys.argv[3]):3d} {1e3 * m['pp_forward_s']:6.1f} "
      f"{1e3 * m['pp_backward_s']:6.1f} {1e3 * m['pp_weight_s']:6.1f} {ms(form)} {ms(idle[0])} "
      f"{ms(idle[1])} {ms(rep[0])} {ms(rep[1])} {ms(eq[0])} {ms(eq[1])} {idle[0] / form:8.2f} "
      f"{idle[1] / form:8.2f}")
PY
  done
done
