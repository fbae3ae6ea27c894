# Helpers of the command-line tests (sourced): failing with a message, the losses of a metrics
# file, a run directory stopped at a checkpoint, two checkpoints `moet checkpoint diff` finds
# identical, and one-line refusals (refused: one line of output in all; expect_error: one line
# on stderr).

fail() {
  echo "FAIL: $*"
  exit 1
}
# The step, loss and gradient-norm fields of a metrics JSONL file (for bitwise comparisons).
losses() { grep -o '"\(step\|loss\|lm_loss\|mtp_loss\|grad_norm\)":[^,]*' "$1"; }
# A copy of run $1's checkpoint at step $2 as run $3 (what a run stopped there leaves).
stopped_at() {
  mkdir -p "$3"
  cp -r "$1/$(printf 'step-%07d' "$2")" "$3/"
  printf 'step-%07d\n' "$2" >"$3/latest"
}
identical_checkpoints() {  # MOET REFERENCE CANDIDATE WHAT: every tensor bitwise equal
  local out
  out="$("$1" checkpoint diff "$2" "$3" 2>&1)" || fail "$4: $out"
  [[ "$out" == *"identical: "*" 0 differences"* ]] || fail "$4: $out"
  echo "ok: $4 (${out##*identical: })"
}
refused() {  # refused TEXT COMMAND...: the command fails with one line containing TEXT
  local expect="$1" out
  shift
  if out=$("$@" 2>&1); then fail "accepted: $*"; fi
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "expected one line, got: $out"
  [[ "$out" == *"$expect"* ]] || fail "expected '$expect' in: $out"
}
mpi_refused() {  # NP TEXT ARGS...: `${mpi[@]} -np NP $moet ARGS` fails saying TEXT (any rank)
  local np="$1" want="$2" err
  shift 2
  if err="$("${mpi[@]}" -np "$np" "$moet" "$@" 2>&1)"; then fail "accepted: $*"; fi
  [[ "$err" == *"$want"* ]] || fail "refusal of '$*' does not say '$want': $err"
  echo "ok: refused ($want)"
}
expect_error() {  # expect_error TEXT COMMAND...: the command fails with one stderr line holding TEXT
  local want="$1" err
  shift
  err=$(mktemp)
  if "$@" >/dev/null 2>"$err"; then
    rm -f "$err"
    fail "accepted: $*"
  fi
  local got
  got=$(cat "$err")
  rm -f "$err"
  [ "$(printf '%s\n' "$got" | wc -l)" -eq 1 ] || fail "'$*': not one line: $got"
  [[ "$got" == *"$want"* ]] || fail "'$*': wanted '$want', got: $got"
}
