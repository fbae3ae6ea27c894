#!/usr/bin/env bash
# `moet train --deterministic` end to end: mpirun -np 2 with micro-batch 2 (and grad-accum 2)
# writes, step by step, exactly the losses and gradient norms of one process with micro-batch 4.
# Usage: mpi_deterministic_cli.sh MOET CONFIG MPIRUN-PREFIX...
set -euo pipefail
moet="$1" config="$2"
shift 2
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
common=(train --model "$config" --data mock --steps 4 --seq 32 --grad-accum 2 --deterministic
        --quiet --peak-tflops 1 --threads 1)
"$moet" "${common[@]}" --micro-batch 4 --metrics "$dir/one.jsonl"
"$@" "$moet" "${common[@]}" --micro-batch 2 --metrics "$dir/two.jsonl"
pick() { grep -o '"\(loss\|lm_loss\|mtp_loss\|grad_norm\)":[^,]*' "$1"; }
pick "$dir/one.jsonl" >"$dir/one.txt"
pick "$dir/two.jsonl" >"$dir/two.txt"
[ "$(wc -l <"$dir/one.txt")" -eq 16 ] || { echo "FAIL: expected 4 steps x 4 values"; exit 1; }
if ! diff "$dir/one.txt" "$dir/two.txt"; then
  echo "FAIL: 2 ranks differ from one process"
  exit 1
fi
echo "2 ranks x micro-batch 2 = 1 process x micro-batch 4, bit for bit (4 steps)"
