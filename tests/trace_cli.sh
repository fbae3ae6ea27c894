#!/usr/bin/env bash
# `moet train --trace` read back (docs/trace.md): short runs of the tiny model on text data,
# with an evaluation after steps 2 and 3, whose per-rank trace files tests/trace_check.py checks
# for the lanes, the span categories where the document puts them (compute on the training
# thread; the experts' dispatch and combine, gradient sync and pipeline messages in each mode),
# evaluation marked, spans nested inside steps, and bytes_in_flight back at 0 after every step.
#   one process: compute categories only, no communication;
#   under mpirun (MPIEXEC given), 2 ranks with --ep 2 (data parallel x2): synchronous all-to-alls
#   on the training thread (--overlap off), the communication thread (--overlap on, with
#   --zero1), --a2a-overlap on the communication thread and synchronous, --dispatcher allgather;
#   --pp 2; and 4 ranks with --pp 2 --vpp 2 --ep 2 --a2a-overlap (combined 1F1B).
# Also checks that the checker fails a trace that lacks what a mode promises.
# Usage: trace_cli.sh MOET CONFIG [MPIEXEC [MPIEXEC-FLAGS...]] (no -np: the test sets it)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
for i in $(seq 1 400); do
  printf 'Document %d: tokens, samples, epochs and ranks of the tiny model.\n%%\n' "$i"
done >"$dir/d.txt"
common=(train --model "$config" --data "$dir/d.txt" --steps 3 --seq 32 --micro-batch 2
        --eval-every 2 --eval-batches 2 --threads 1 --quiet --peak-tflops 1)
check=(/usr/bin/python3 "$here/trace_check.py" --steps 3 --evals 2)
run() {  # name np checker-flags -- train-flags...
  local name="$1" np="$2" flags=()
  shift 2
  while [ "$1" != "--" ]; do
    flags+=("$1")
    shift
  done
  shift
  if [ "$np" -eq 1 ]; then
    "$moet" "${common[@]}" "$@" --trace "$dir/$name.json"
    "${check[@]}" "${flags[@]}" "$dir/$name.json" || fail "$name"
  else
    "${mpi[@]}" -np "$np" "$moet" "${common[@]}" "$@" --trace "$dir/$name.json"
    local files=()
    for ((r = 0; r < np; ++r)); do files+=("$dir/$name.rank$r.json"); done
    "${check[@]}" "${flags[@]}" "${files[@]}" || fail "$name"
  fi
}
if [ ${#mpi[@]} -eq 0 ]; then
  run one 1 --comm none --
  # the checker is not a rubber stamp: one process has no exchanges to find
  if "${check[@]}" --comm inline "$dir/one.json" >/dev/null; then
    fail "the checker accepted a one-process trace as an expert-parallel one"
  fi
  echo "ok: one process"
  exit 0
fi
run sync 2 --comm inline --dp -- --ep 2 --overlap off
run thread 2 --comm thread --dp --zero1 -- --ep 2 --overlap on --zero1
run a2a 2 --comm thread --dp -- --ep 2 --overlap on --a2a-overlap
run a2a_sync 2 --comm inline --dp -- --ep 2 --overlap off --a2a-overlap
run allgather 2 --comm inline --dp --allgather -- --ep 2 --overlap off --dispatcher allgather
run pp 2 --comm none --pp -- --pp 2 --pp-layout "Et|ttmL" --grad-accum 4
run pp_zb1p 2 --comm none --pp --passes split -- --pp 2 --pp-layout "Et|ttmL" --grad-accum 4 \
  --pipeline-schedule zb1p
run pp_dualpipev 2 --comm none --pp --passes pairs -- --pp 2 --pp-layout "Et|t|t|mL" \
  --grad-accum 4 --pipeline-schedule dualpipev
# the pass kinds are the schedule's: 1F1B has no W
if "${check[@]}" --comm none --pp --passes split "$dir/pp.rank0.json" "$dir/pp.rank1.json" >/dev/null; then
  fail "the checker accepted 1F1B's passes as a zero-bubble schedule's"
fi
run pp_combined 4 --comm thread --dp --pp -- --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --ep 2 \
  --a2a-overlap --overlap on --grad-accum 4
# the lanes differ by mode: a synchronous run's exchanges are not on a comm lane
if "${check[@]}" --comm thread --dp "$dir/sync.rank0.json" "$dir/sync.rank1.json" >/dev/null; then
  fail "the checker accepted synchronous exchanges as the communication thread's"
fi
echo "ok: every mode"
