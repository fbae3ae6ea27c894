#!/usr/bin/env bash
# Crash safety (docs/checkpoints.md): a run saving every step is SIGKILLed again and again, half
# the time the moment a save is under way (its step-N.tmp directory exists), half the time at a
# random moment of a step. After each kill the newest checkpoint verifies and the run resumes
# (--resume auto); the run that finally completes has bitwise the parameters, moments and losses
# of a run never interrupted. With an MPI launcher, one rank of the job is killed and the whole
# job must end by itself.
# Usage: [PRECISION=mxfp8] [EXTRA_ARGS="--pp 2 ..."] checkpoint_kill.sh MOET CONFIG
#        [MPI-LAUNCHER-PREFIX...]
set -euo pipefail
moet="$1" config="$2"
shift 2
launcher=("$@")
dir="$(mktemp -d)"
pids_file="$dir/pids"
cleanup() {
  pkill -9 -f -- "--out $dir/" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
steps=400
args=(train --model "$config" --data mock --seq 32 --micro-batch 2 --quiet --eval-batches 0
      --threads 1 --peak-tflops 1 --steps $steps --save-every 1 --keep-last 3)
[ ${#launcher[@]} -gt 0 ] && args+=(--ep 2 --zero1)
# EXTRA_ARGS: more flags for every run, e.g. a pipeline layout
if [ -n "${EXTRA_ARGS:-}" ]; then
  read -ra extra <<<"$EXTRA_ARGS"
  args+=("${extra[@]}")
fi
args+=(--precision "${PRECISION:-fp32}")
losses() { grep -o '"\(step\|loss\|lm_loss\|mtp_loss\|grad_norm\)":[^,]*' "$1"; }

"${launcher[@]}" "$moet" "${args[@]}" --out "$dir/straight" --metrics "$dir/straight.jsonl"

# The process to kill: the run itself, or one rank of the job (a child of mpirun).
victim() {
  local p=$1
  if [ ${#launcher[@]} -gt 0 ]; then
    local kids
    kids=$(pgrep -P "$p" -f "out $dir/run" || true)
    [ -n "$kids" ] && echo "$kids" | sort -n | tail -1
  else
    echo "$p"
  fi
}

# Six kills, at least one of them while a save is half-written. Whether a kill lands inside a
# save is a race (the save of the tiny model takes milliseconds), so on a loaded machine more
# rounds are granted, up to 12, until one did.
kills=0 during_save=0
for round in $(seq 12); do
  [ $kills -ge 6 ] && [ $during_save -ge 1 ] && break
  "${launcher[@]}" "$moet" "${args[@]}" --out "$dir/run" --resume auto \
    --metrics "$dir/run.jsonl" >>"$dir/run.out" 2>&1 &
  pid=$!
  # let it train a little first
  for _ in $(seq 400); do
    [ -f "$dir/run.jsonl" ] && [ "$(wc -l <"$dir/run.jsonl")" -ge $((round * 30)) ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
  done
  kill -0 $pid 2>/dev/null || break  # finished
  v=""
  for _ in $(seq 200); do
    v=$(victim $pid)
    [ -n "$v" ] && break
    sleep 0.01
  done
  [ -n "$v" ] || fail "no process to kill"
  if [ $((round % 2)) -eq 1 ]; then  # during a save
    for _ in $(seq 20000); do
      compgen -G "$dir/run/step-*.tmp" >/dev/null && break
    done
  else  # at a random moment
    sleep "0.0$((RANDOM % 10))"
  fi
  kill -9 "$v" 2>/dev/null || true
  kills=$((kills + 1))
  # the job ends by itself (mpirun takes the other ranks down)
  for _ in $(seq 300); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill -0 $pid 2>/dev/null && fail "the job did not end within 30 s of a rank's SIGKILL"
  wait $pid 2>/dev/null || true
  if [ ${#launcher[@]} -gt 0 ]; then  # the launcher names the rank that died, once per kill
    named=$(grep -c "process rank [0-9]* with PID .* exited on signal 9" "$dir/run.out" || true)
    [ "$named" -ge "$kills" ] ||
      fail "nothing names the killed rank of kill $kills: $(tail -12 "$dir/run.out")"
  fi
  compgen -G "$dir/run/step-*.tmp" >/dev/null && during_save=$((during_save + 1))
  # the newest complete checkpoint verifies
  "$moet" checkpoint inspect "$dir/run" >"$dir/inspect.txt" 2>&1 ||
    fail "after kill $kills the latest checkpoint does not verify: $(cat "$dir/inspect.txt")"
done
"${launcher[@]}" "$moet" "${args[@]}" --out "$dir/run" --resume auto --metrics "$dir/run.jsonl" \
  >>"$dir/run.out" 2>&1 || fail "the final resume failed: $(tail -3 "$dir/run.out")"
[ $kills -ge 3 ] || fail "only $kills kills landed before the run finished"
[ $during_save -ge 1 ] || fail "no kill landed during a save"
"$moet" checkpoint diff "$dir/straight" "$dir/run" >"$dir/diff.txt" ||
  fail "after $kills kills the state differs: $(head -3 "$dir/diff.txt")"
diff <(losses "$dir/straight.jsonl") <(losses "$dir/run.jsonl") >/dev/null ||
  fail "after $kills kills the losses differ"
echo "PASS: $kills SIGKILLs ($during_save left a save half-written); every latest checkpoint verified; the" \
  "resumed run equals the straight one bit for bit (state and $steps steps of losses)"
