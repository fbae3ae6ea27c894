#!/usr/bin/env bash
# SIGTERM to one rank of an mpirun job (as a scheduler's preemption may deliver it): every rank
# stops after the same step, the checkpoint is saved, the job exits 0 saying where; resuming
# gives bitwise the straight run.
# Usage: checkpoint_mpi_signal.sh MOET CONFIG MPI-LAUNCHER-PREFIX... (with the process count)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'pkill -9 -f -- "--out $dir/" 2>/dev/null || true; rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
steps=300
args=(train --model "$config" --data mock --seq 32 --micro-batch 2 --quiet --eval-batches 0
      --threads 1 --peak-tflops 1 --steps $steps --ep 2 --zero1)
"${mpi[@]}" "$moet" "${args[@]}" --out "$dir/straight"
"${mpi[@]}" "$moet" "${args[@]}" --out "$dir/run" --metrics "$dir/m.jsonl" >"$dir/out.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -f "$dir/m.jsonl" ] && [ "$(wc -l <"$dir/m.jsonl")" -ge 5 ] && break
  sleep 0.05
done
rank=$(pgrep -P $pid -f "out $dir/run" | sort -n | tail -1)
[ -n "$rank" ] || fail "no rank process found"
kill -TERM "$rank"
rc=0
wait $pid || rc=$?
[ $rc -eq 0 ] || fail "exit $rc: $(cat "$dir/out.txt")"
grep -q "stopped by .* after step [0-9]*; checkpoint at $dir/run/step-" "$dir/out.txt" ||
  fail "no line saying where: $(cat "$dir/out.txt")"
stopped=$("$moet" checkpoint inspect "$dir/run" | sed -n 's/^step \([0-9]*\) .*/\1/p')
[ "$stopped" -lt $steps ] || fail "the signal came too late to test anything"
"${mpi[@]}" "$moet" "${args[@]}" --out "$dir/run" --resume auto
"$moet" checkpoint diff "$dir/straight" "$dir/run" >/dev/null || fail "resumed run differs"
echo "PASS: SIGTERM to one rank: all stopped after step $stopped, saved, exit 0; resumed bitwise"
