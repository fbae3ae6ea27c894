#!/usr/bin/env bash
# The FP4 recipes under --deterministic (docs/precision.md, "Training in NVFP4"): with every
# decoder layer in FP4 (--bf16-layers 0), nvfp4 and mxfp4 runs on 2 ranks — expert parallel
# (--ep 2, all-to-all and all-gather), data parallel, and pipeline parallel (--pp 2, and --vpp 2)
# — write checkpoints that
# `moet checkpoint diff` finds bitwise equal to one process's; an nvfp4 run resumed from its
# step-2 checkpoint ends bitwise where the straight run ends; and the FP4 recipes do not
# compute what bf16 computes (so a recipe that silently fell back could not pass).
# Usage: mpi_fp4_cli.sh MOET CONFIG MPIEXEC [MPIEXEC-FLAGS...] (no -np)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
common=(train --model "$config" --data mock --seq 32 --grad-accum 2 --deterministic --quiet
        --peak-tflops 1 --eval-batches 0 --threads 1 --bf16-layers 0)
same() {  # same A B WHAT: checkpoints A and B bitwise equal
  "$moet" checkpoint diff "$1" "$2" >"$dir/diff.txt" 2>&1 ||
    fail "$3: differs from one process: $(head -3 "$dir/diff.txt")"
  echo "ok: $3 = one process, bit for bit"
}
for p in nvfp4 mxfp4; do
  "$moet" "${common[@]}" --steps 3 --precision "$p" --micro-batch 4 --out "$dir/$p-one"
  "${mpi[@]}" -np 2 "$moet" "${common[@]}" --steps 3 --precision "$p" --micro-batch 2 --ep 2 \
    --out "$dir/$p-ep"
  same "$dir/$p-one" "$dir/$p-ep" "$p, --ep 2"
  "${mpi[@]}" -np 2 "$moet" "${common[@]}" --steps 3 --precision "$p" --micro-batch 2 \
    --out "$dir/$p-dp"
  same "$dir/$p-one" "$dir/$p-dp" "$p, 2 data-parallel ranks"
  "${mpi[@]}" -np 2 "$moet" "${common[@]}" --steps 3 --precision "$p" --micro-batch 4 --pp 2 \
    --pp-layout "Et|ttmL" --out "$dir/$p-pp"
  same "$dir/$p-one" "$dir/$p-pp" "$p, --pp 2"
done
# nvfp4 under the interleaved schedule (--vpp 2) and with the all-gather dispatcher (whose
# expert segments are quantized on arrival rather than at the source)
"${mpi[@]}" -np 2 "$moet" "${common[@]}" --steps 3 --precision nvfp4 --micro-batch 4 --pp 2 \
  --vpp 2 --pp-layout "Et|t|t|mL" --out "$dir/nvfp4-vpp"
same "$dir/nvfp4-one" "$dir/nvfp4-vpp" "nvfp4, --pp 2 --vpp 2"
"${mpi[@]}" -np 2 "$moet" "${common[@]}" --steps 3 --precision nvfp4 --micro-batch 2 --ep 2 \
  --dispatcher allgather --out "$dir/nvfp4-ag"
same "$dir/nvfp4-one" "$dir/nvfp4-ag" "nvfp4, --ep 2 --dispatcher allgather"
# the recipes compute something of their own
"$moet" "${common[@]}" --steps 3 --precision bf16 --micro-batch 4 --out "$dir/bf16-one"
for pair in "nvfp4 bf16" "mxfp4 bf16" "nvfp4 mxfp4"; do
  set -- $pair
  if "$moet" checkpoint diff "$dir/$1-one" "$dir/$2-one" >/dev/null 2>&1; then
    fail "$1 and $2 trained the same weights"
  fi
done
# resume: stopped after step 2 of 4, resumed, bitwise the straight run (the stochastic rounding
# and the Hadamard signs of steps 3 and 4 come from the seed and the step alone)
"$moet" "${common[@]}" --steps 4 --precision nvfp4 --micro-batch 4 --save-every 2 \
  --out "$dir/straight"
stopped_at "$dir/straight" 2 "$dir/resumed"
"$moet" "${common[@]}" --steps 4 --precision nvfp4 --micro-batch 4 --save-every 2 \
  --out "$dir/resumed" --resume auto
same "$dir/straight" "$dir/resumed" "nvfp4 resumed at step 2"
