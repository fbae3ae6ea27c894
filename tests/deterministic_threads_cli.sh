#!/usr/bin/env bash
# --deterministic does not depend on the thread count (docs/parallel.md, "--deterministic"):
# in fp32 and bf16, one process on 1, 2 and 3 threads, and 2 ranks x 1 and x 2 threads with
# --ep 2 (micro-batch 2 each), write checkpoints that `moet checkpoint diff` finds bitwise
# equal to one process on 1 thread with micro-batch 4. The model (tests/configs/threads.json,
# small-bpe.json's widths on 2 layers) has GEMMs whose reduction oneDNN splits over threads
# when left to itself: before GEMMs were cut into thread-independent tiles, 1 and 2 threads
# differed from the first step.
# Usage: deterministic_threads_cli.sh MOET CONFIG MPIEXEC [MPIEXEC-FLAGS...] (no -np)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
common=(train --model "$config" --data mock --steps 2 --seq 64 --deterministic --quiet
        --peak-tflops 1 --eval-batches 1)
for precision in fp32 bf16; do
  ref="$dir/$precision-1x1"
  "$moet" "${common[@]}" --precision "$precision" --micro-batch 4 --threads 1 --out "$ref"
  check() {  # name: the run in $dir/$precision-name against the reference
    if ! "$moet" checkpoint diff "$ref" "$dir/$precision-$1" >"$dir/diff.txt" 2>&1; then
      head -5 "$dir/diff.txt"
      echo "FAIL: $precision, $1 differs from one process on 1 thread"
      exit 1
    fi
    echo "ok: $precision, $1 = one process on 1 thread, bit for bit"
    rm -rf "$dir/$precision-$1"
  }
  for t in 2 3; do
    "$moet" "${common[@]}" --precision "$precision" --micro-batch 4 --threads "$t" \
      --out "$dir/$precision-1x$t"
    check "1x$t"
  done
  for t in 1 2; do
    "${mpi[@]}" -np 2 "$moet" "${common[@]}" --precision "$precision" --micro-batch 2 --ep 2 \
      --threads "$t" --out "$dir/$precision-2x$t"
    check "2x$t"
  done
  rm -rf "$ref"
done
