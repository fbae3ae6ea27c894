#!/usr/bin/env bash
# The performance model's activation memory against what moet train plans, with and without
# activation recomputation: calibrate this machine with `moet bench` (the `local` system, whose
# ranks share one machine: moet's own stack), predict the activations of configs/bench-dsv3.json
# with `moet simulate`, and read the trainer's header for the same shape (what it keeps from
# forward to backward plus the region recomputed layers share; the temporaries of one layer
# call are, as on GPUs, outside the model's activations). Each prediction must lie within 20%
# of the trainer's plan, and recomputation must move both the same way.
# Usage: sim_memory_check.sh MOET SOURCE_DIR
set -euo pipefail
moet=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=$root/configs/bench-dsv3.json
"$moet" bench --threads 1 --out "$tmp/local.json" >/dev/null

predicted() {  # predicted FLAGS...: the simulator's activations, MiB
  "$moet" simulate --model "$model" --system "$tmp/local.json" --precision fp32 --seq 256 \
    --mbs 2 --gbs 2 --gpus 1 --json "$@" 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["memory_gb"]["activations"] * 1e9 / 2**20)'
}
planned() {  # planned FLAGS...: kept + region from the trainer's header, MiB
  "$moet" train --model "$model" --data mock --steps 1 --micro-batch 2 --seq 256 --threads 1 \
    --precision fp32 --eval-batches 0 --metrics "$tmp/m.jsonl" --overwrite-metrics "$@" |
    sed -n 's/^activations: \([0-9.]*\) MB kept.*temporaries, \([0-9.]*\) MB the region.*/\1 \2/p' |
    awk '{ print $1 + $2 }'
}

sel=(mla_up_proj moe_act layernorm)
names=("none" "core_attn" "mla_up_proj moe_act layernorm" "moe" "full")
sim_flags=("" "--recompute selective --recompute-modules core_attn"
  "--recompute selective --recompute-modules ${sel[*]}"
  "--recompute selective --recompute-modules moe" "--recompute full")
train_flags=("" "--recompute-granularity selective --recompute-modules core_attn"
  "--recompute-granularity selective --recompute-modules ${sel[*]}"
  "--recompute-granularity selective --recompute-modules moe" "--recompute-granularity full")
fail=0
prev_sim=""
prev_plan=""
echo "recompute | predicted MiB | planned MiB | ratio"
for i in "${!names[@]}"; do
  # shellcheck disable=SC2086  # the flags are words
  p=$(predicted ${sim_flags[$i]})
  # shellcheck disable=SC2086
  m=$(planned ${train_flags[$i]})
  [ -n "$m" ] || { echo "no activations line in the trainer's header (${names[$i]})"; exit 1; }
  r=$(/usr/bin/python3 -c "print(f'{$p / $m:.3f}')")
  printf '%s | %.1f | %.1f | %s\n' "${names[$i]}" "$p" "$m" "$r"
  if ! /usr/bin/python3 -c "import sys; sys.exit(0 if 0.8 <= $r <= 1.2 else 1)"; then
    echo "FAIL: ${names[$i]}: predicted $p MiB, planned $m MiB"
    fail=1
  fi
  if [ -n "$prev_sim" ] && [ "${names[$i]}" = "full" ]; then
    # full keeps less than any selective set, on both sides
    /usr/bin/python3 -c "import sys; sys.exit(0 if $p < $prev_sim and $m < $prev_plan else 1)" ||
      { echo "FAIL: full does not keep less than ${names[$((i - 1))]}"; fail=1; }
  fi
  prev_sim=$p
  prev_plan=$m
done
exit $fail
