#!/usr/bin/env bash
# Resharding (docs/checkpoints.md): a checkpoint saved under one layout resumes under another,
# and the run goes on exactly as that layout would have gone on from that state.
#  - 2 ranks, --ep 2 --zero1 (experts split over the ranks, moments sharded) resumed under
#    2 ranks --ep 1 and 2 ranks --ep 2 without ZeRO-1: bitwise the straight run (EP layouts and
#    ZeRO-1 are bitwise-neutral at --grad-accum 1).
#  - --deterministic: 4 ranks x micro-batch 1 with ZeRO-1, and 2 ranks x 2, resumed in one
#    process x 4 (and the other way round): bitwise the straight one-process run.
# Usage: checkpoint_reshard.sh MOET CONFIG MPI-LAUNCHER-PREFIX... (without the process count)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
stopped_at() {  # a copy of run $1's step-$2 checkpoint as run $3
  mkdir -p "$3"
  cp -r "$1/$(printf 'step-%07d' "$2")" "$3/"
}
same() { "$moet" checkpoint diff "$1" "$2" >"$dir/diff.txt" || fail "$3: $(head -3 "$dir/diff.txt")"; }
base=(train --model "$config" --data mock --seq 32 --quiet --eval-batches 0 --threads 1
      --peak-tflops 1 --steps 4)

# Expert parallelism and ZeRO-1.
ep=("${base[@]}" --micro-batch 2)
"${mpi[@]}" 2 "$moet" "${ep[@]}" --ep 2 --zero1 --out "$dir/ep2z" --save-every 2
for layout in "--ep 1" "--ep 2"; do
  name="to-${layout// /}"
  stopped_at "$dir/ep2z" 2 "$dir/$name"
  # shellcheck disable=SC2086
  "${mpi[@]}" 2 "$moet" "${ep[@]}" $layout --out "$dir/$name" --resume auto
  same "$dir/ep2z" "$dir/$name" "2 ranks --ep 2 --zero1 resumed with $layout"
done
echo "2 ranks --ep 2 --zero1 -> --ep 1 / --ep 2: bitwise"

# Data parallelism with --deterministic: any number of ranks is one process.
det=("${base[@]}" --deterministic --grad-accum 2)
"$moet" "${det[@]}" --micro-batch 4 --out "$dir/one"
"${mpi[@]}" 4 "$moet" "${det[@]}" --micro-batch 1 --zero1 --out "$dir/four" --save-every 2
stopped_at "$dir/four" 2 "$dir/four-to-one"
"$moet" "${det[@]}" --micro-batch 4 --out "$dir/four-to-one" --resume auto
same "$dir/one" "$dir/four-to-one" "4 ranks --zero1 resumed in one process"
"$moet" "${det[@]}" --micro-batch 4 --out "$dir/one-sched" --save-every 2  # same LR schedule
stopped_at "$dir/one-sched" 2 "$dir/one-to-two"
"${mpi[@]}" 2 "$moet" "${det[@]}" --micro-batch 2 --out "$dir/one-to-two" --resume auto
same "$dir/one" "$dir/one-to-two" "one process resumed on 2 ranks"
echo "--deterministic: 4 ranks (ZeRO-1) -> 1 process, 1 process -> 2 ranks: bitwise"
echo "PASS"
