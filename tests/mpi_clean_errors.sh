#!/usr/bin/env bash
# Under mpirun, a refused `moet train` prints its one error line once (not once per rank) and
# every rank ends cleanly: a non-zero exit, no MPI_ABORT banner, no file written, no hang — for a
# mistyped flag, a layout all ranks refuse, an existing --metrics file only rank 0 looks at, and
# an existing trace file only rank 1 looks at. Warnings and the announced --seq appear once. A
# real failure after the ranks agreed (rank 1 cannot write its trace at the end) still takes
# every rank down at once through MPI_Abort (a non-zero status within the timeout; Open MPI's
# banner for it is not always printed whole, so it is not looked for).
# Usage: mpi_clean_errors.sh MOET CONFIG MPIEXEC [MPIEXEC-FLAGS...] (no -np: the test sets it)
set -euo pipefail
moet=$1
config=$2
shift 2
mpi=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
export OMP_NUM_THREADS=1
work="$tmp/work"
mkdir "$work"
snapshot() { (cd "$work" && find . -printf '%p %s %T@\n' | sort); }
train=(train --model "$config" --data mock --steps 2 --micro-batch 2 --seq 16 --quiet
  --peak-tflops 1 --eval-batches 0 --threads 1)

# clean_refusal TEXT FLAGS...: 2 ranks refuse with TEXT on one line, cleanly, writing nothing
clean_refusal() {
  local want="$1" out rc before
  shift
  before=$(snapshot)
  set +e
  out=$(cd "$work" && timeout 60 "${mpi[@]}" -np 2 "$moet" "${train[@]}" "$@" 2>&1)
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || fail "accepted on 2 ranks: $*"
  [ "$rc" -ne 124 ] || fail "2 ranks hung: $*"
  [ "$(grep -c '^moet' <<<"$out")" -eq 1 ] || fail "$*: not one moet line: $out"
  [ "$(grep -cF -- "moet: error: $want" <<<"$out")" -eq 1 ] || fail "$*: wanted '$want' once: $out"
  if grep -qE 'MPI_ABORT|mpirun has exited due to|exiting improperly' <<<"$out"; then
    fail "$*: an abort banner: $out"
  fi
  [ "$(snapshot)" = "$before" ] || fail "$* left files behind: $(snapshot)"
}
clean_refusal "unknown flag --stpes (did you mean --steps?)" --stpes 3
clean_refusal "--ep 3 does not divide the 2 ranks" --ep 3 --out run --metrics m.jsonl
clean_refusal "--seq 100 exceeds the model's max_position_embeddings (64)" --seq 100
clean_refusal "--doc-boundary 'never' is not one of percent, blank-line, file" --data x.txt --doc-boundary never
clean_refusal "--data 'nothing' is no text file or directory" --data nothing
echo precious >"$work/m.jsonl"  # only rank 0 writes (and checks) the metrics file
clean_refusal "--metrics 'm.jsonl' already exists" --metrics m.jsonl --out run
echo '{}' >"$work/t.rank1.json"  # only rank 1 checks its own trace file
clean_refusal "--trace: 't.rank1.json' already exists" --trace t.json --out run

# a warning and the adapted --seq: once, from rank 0
out=$(cd "$work" && timeout 60 "${mpi[@]}" -np 2 "$moet" train --model "$config" --data mock \
  --steps 1 --micro-batch 2 --peak-tflops 1 --eval-batches 0 --threads 64 2>&1 | grep '^moet') ||
  fail "refused: --threads 64"
[ "$(grep -c 'moet: warning: --threads 64' <<<"$out")" -eq 1 ] || fail "not one warning: $out"
[ "$(grep -c 'moet train: --seq 64, the model' <<<"$out")" -eq 1 ] || fail "not one --seq line: $out"

# after the agreement, a failure on one rank still ends the job at once
rm "$work/t.rank1.json"
mkdir -p "$work/t.rank1.json/x"  # rank 1 cannot replace a directory with its trace
set +e
out=$(cd "$work" && timeout 60 "${mpi[@]}" -np 2 "$moet" "${train[@]}" --trace t.json \
  --overwrite 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a failing rank did not end the job (status $rc): $out"
[[ "$out" == *"moet: rank 1: error: cannot rename"* ]] || fail "rank 1's failure is not named: $out"
echo "mpi_clean_errors: 7 refusals on 2 ranks, each one line, no abort banner; a mid-run failure aborts"
