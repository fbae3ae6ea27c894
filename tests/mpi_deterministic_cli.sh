#!/usr/bin/env bash
# `moet train --deterministic` end to end: under mpirun, N ranks with micro-batch 2 and
# grad-accum 2 write, step by step, exactly the metrics (losses, gradient norm, expert load) of
# one process with micro-batch 2N — data parallelism alone and with the routed experts sharded
# over --ep ranks (each expert's gradient added per source rank, docs/parallel.md):
#   2 ranks: --ep 1, --ep 2, --ep 2 --zero1 against one process with micro-batch 4, --ep 2
#   in FP8 (blockwise) against one process in FP8, and --ep 2 on a Megatron dataset (each rank
#   reads its slice of the sample index) against one process on it;
#   4 ranks: --ep 2 (two expert-parallel groups), --ep 4, and --ep 2 --zero1 (each expert's
#   gradient reduce-scattered over its two replicas) with the communication thread, against
#   one process with micro-batch 8.
# Usage: mpi_deterministic_cli.sh MOET CONFIG MPIEXEC [MPIEXEC-FLAGS...] (no -np: the test sets it)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
steps=4
common=(train --model "$config" --data mock --steps "$steps" --seq 32 --grad-accum 2
        --deterministic --quiet --peak-tflops 1 --threads 1)
pick() {
  grep -o '"\(loss\|lm_loss\|mtp_loss\|balance_loss\|z_loss\|grad_norm\|max_expert_load\)":[^,}]*' "$1"
}
one() {  # micro-batch, flags...: one process with the whole micro-batch, the reference
  local mb="$1"
  shift
  rm -f "$dir/one.jsonl"
  "$moet" "${common[@]}" --micro-batch "$mb" "$@" --metrics "$dir/one.jsonl"
  pick "$dir/one.jsonl" >"$dir/one.txt"
  [ "$(wc -l <"$dir/one.txt")" -eq $((steps * 7)) ] || {
    echo "FAIL: expected $steps steps x 7 values"
    exit 1
  }
  reference="1 process x micro-batch $mb${*:+ $*}"
}
same() {  # ranks, flags...: as many ranks with micro-batch 2 against the last reference
  local np="$1"
  shift
  rm -f "$dir/run.jsonl"
  "${mpi[@]}" -np "$np" "$moet" "${common[@]}" --micro-batch 2 "$@" --metrics "$dir/run.jsonl"
  pick "$dir/run.jsonl" >"$dir/run.txt"
  if ! diff "$dir/one.txt" "$dir/run.txt"; then
    echo "FAIL: $np ranks x micro-batch 2 $* differ from $reference"
    exit 1
  fi
  echo "ok: $np ranks x micro-batch 2 $* = $reference, bit for bit"
}
one 4
same 2 --ep 1
same 2 --ep 2
same 2 --ep 2 --zero1
one 4 --precision fp8-blockwise
same 2 --ep 2 --precision fp8-blockwise
for i in $(seq 1 300); do printf 'Document %d: tokens, samples, epochs and ranks.\n%%\n' "$i"; done \
  >"$dir/d.txt"
"$moet" data prepare --input "$dir/d.txt" --output "$dir/d" >/dev/null
one 4 --data "$dir/d"
same 2 --ep 2 --data "$dir/d"
one 8
same 4 --ep 2
same 4 --ep 4
same 4 --ep 2 --zero1 --overlap on
