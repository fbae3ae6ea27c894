#!/usr/bin/env bash
# Checkpoints through `moet train`, one process (docs/checkpoints.md):
#  - in every precision, a run resumed from its step-3 checkpoint ends bitwise where the
#    straight run ends (parameters, both AdamW moments, expert biases) with the same losses;
#  - SIGTERM finishes the step, saves, exits 0 saying where; resuming that gives the straight run;
#  - a synchronous save writes what the asynchronous one writes;
#  - refusals are one line and leave the run directory as it was: a fresh start into a run
#    directory with checkpoints, a bit flip, another model's config, another seed;
#  - a non-finite loss stops the run (exit 1) keeping the last good checkpoint; --skip-nonfinite
#    skips such steps first;
#  - `moet checkpoint diff` reports a step counter and weights that differ (exit 1);
#  - `moet checkpoint inspect` verifies the checksums.
# Usage: checkpoint_cli.sh MOET CONFIG
set -euo pipefail
moet="$1" config="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
common=(train --model "$config" --data mock --seq 32 --micro-batch 2 --quiet --eval-batches 0
        --threads 1 --peak-tflops 1)
fingerprint() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }

# 1. Resume is bitwise in every precision.
for p in fp32 bf16 mxfp8 fp8-blockwise; do
  "$moet" "${common[@]}" --precision "$p" --steps 6 --out "$dir/$p-a" --save-every 3 \
    --metrics "$dir/$p-a.jsonl"
  stopped_at "$dir/$p-a" 3 "$dir/$p-b"
  head -5 "$dir/$p-a.jsonl" >"$dir/$p-b.jsonl"  # with 2 lines of steps after the checkpoint
  "$moet" "${common[@]}" --precision "$p" --steps 6 --out "$dir/$p-b" --resume auto \
    --metrics "$dir/$p-b.jsonl"
  "$moet" checkpoint diff "$dir/$p-a" "$dir/$p-b" >"$dir/diff.txt" ||
    fail "$p: the resumed run's state differs: $(cat "$dir/diff.txt")"
  diff <(losses "$dir/$p-a.jsonl") <(losses "$dir/$p-b.jsonl") >/dev/null ||
    fail "$p: the resumed run's losses differ"
  [ "$(grep -c '"step"' "$dir/$p-b.jsonl")" -eq 6 ] || fail "$p: metrics file not continued"
done
echo "resume from step 3 of 6 is bitwise in fp32, bf16, mxfp8, fp8-blockwise"
# The oracle fails where it must (negative controls through the command; the unit test
# CheckpointDiff.NegativeControlsAreFoundAndNamed changes one element, one moment, another layout):
# the step-3 and step-6 checkpoints of one run differ in the step counter and in every tensor (the first 20 lines name them).
rc=0
"$moet" checkpoint diff "$dir/fp32-a/step-0000003" "$dir/fp32-a" >"$dir/diff.txt" || rc=$?
[ $rc -eq 1 ] || fail "checkpoint diff of steps 3 and 6 exits $rc, not 1: $(cat "$dir/diff.txt")"
grep -q '^step: 3 vs 6$' "$dir/diff.txt" || fail "the step counter is not reported: $(cat "$dir/diff.txt")"
grep -q '^adam_m/model.embed_tokens.weight: [0-9]* of 16448 values differ' "$dir/diff.txt" ||
  fail "a changed tensor is not named: $(cat "$dir/diff.txt")"
grep -q '^different: ' "$dir/diff.txt" || fail "no verdict line: $(cat "$dir/diff.txt")"

# 2. SIGTERM: finish the step, save, exit 0; resuming gives the straight run.
steps=1500
"$moet" "${common[@]}" --steps $steps --out "$dir/straight"
"$moet" "${common[@]}" --steps $steps --out "$dir/term" --metrics "$dir/term.jsonl" \
  >"$dir/term.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -f "$dir/term.jsonl" ] && [ "$(wc -l <"$dir/term.jsonl")" -ge 5 ] && break
  sleep 0.05
done
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ $rc -eq 0 ] || fail "SIGTERM: exit $rc: $(cat "$dir/term.out")"
grep -q "stopped by SIGTERM after step [0-9]*; checkpoint at $dir/term/step-" "$dir/term.out" ||
  fail "SIGTERM: no line saying where: $(cat "$dir/term.out")"
stopped=$("$moet" checkpoint inspect "$dir/term" | sed -n 's/^step \([0-9]*\) .*/\1/p')
[ "$stopped" -lt $steps ] || fail "SIGTERM came too late to test anything"
"$moet" "${common[@]}" --steps $steps --out "$dir/term" --resume auto
"$moet" checkpoint diff "$dir/straight" "$dir/term" >/dev/null ||
  fail "SIGTERM at step $stopped, resumed: differs from the straight run"
echo "SIGTERM after step $stopped of $steps: saved, exit 0; resumed bitwise"

# 3. A synchronous save writes the same checkpoint.
"$moet" "${common[@]}" --steps $steps --out "$dir/sync" --sync-save
"$moet" checkpoint diff "$dir/straight" "$dir/sync" >/dev/null || fail "--sync-save differs"

# 4. Refusals: one line, nothing on disk changed.
before=$(fingerprint "$dir/fp32-a")
refused "already holds checkpoints" "$moet" "${common[@]}" --steps 6 --out "$dir/fp32-a"
cfg2="$dir/other.json"
sed 's/"moe_intermediate_size": *\([0-9]*\)/"moe_intermediate_size": 48/' "$config" >"$cfg2"
cmp -s "$cfg2" "$config" && fail "could not make another model's config"
refused "config field 'moe_intermediate_size'" "$moet" train --model "$cfg2" --data mock --seq 32 \
  --micro-batch 2 --quiet --steps 6 --out "$dir/fp32-a" --resume auto
refused "--seed 99 differs" "$moet" "${common[@]}" --steps 6 --out "$dir/fp32-a" --resume auto \
  --seed 99
refused "global batch" "$moet" "${common[@]}" --steps 3 --out "$dir/fp32-c" \
  --resume "$dir/fp32-a/step-0000006" --micro-batch 4
stopped_at "$dir/fp32-a" 3 "$dir/flip"
shard="$dir/flip/step-0000003/rank-00000.safetensors"
size=$(stat -c %s "$shard")
printf '\x7f' | dd of="$shard" bs=1 seek=$((size - 3)) conv=notrunc status=none
flipped=$(fingerprint "$dir/flip")
refused "checksum mismatch in tensor" "$moet" "${common[@]}" --steps 6 --out "$dir/flip" \
  --resume auto
"$moet" checkpoint inspect "$dir/flip" >/dev/null 2>&1 && fail "inspect passed a flipped bit"
truncate -s $((size / 2)) "$shard"
refused "rank-00000.safetensors" "$moet" "${common[@]}" --steps 6 --out "$dir/flip" --resume auto
[ "$(fingerprint "$dir/fp32-a")" = "$before" ] || fail "a refused run changed $dir/fp32-a"
[ -z "$(ls "$dir/flip" | grep -v '^step-0000003$\|^latest$')" ] || fail "refused runs wrote files"
echo "refusals: one line each, nothing overwritten"

# 5. A non-finite loss stops the run, keeping the last good checkpoint.
nan=(--steps 6 --lr 1e30 --weight-decay 0 --schedule constant --warmup 0 --save-every 1)
rc=0
"$moet" "${common[@]}" "${nan[@]}" --out "$dir/nan" >"$dir/nan.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "divergence: exit $rc"
grep -q "training diverged at step 2: the loss is NaN.*the last good checkpoint is $dir/nan/step-0000001" \
  "$dir/nan.out" || fail "divergence message: $(cat "$dir/nan.out")"
"$moet" checkpoint inspect "$dir/nan" >/dev/null || fail "the last good checkpoint does not verify"
rc=0
"$moet" "${common[@]}" "${nan[@]}" --out "$dir/nan2" --skip-nonfinite 2 >"$dir/nan2.out" 2>&1 ||
  rc=$?
[ $rc -eq 1 ] && grep -q "training diverged at step 4" "$dir/nan2.out" ||
  fail "--skip-nonfinite 2 should skip steps 2 and 3: $(cat "$dir/nan2.out")"
echo "non-finite loss: stopped at the first (or after --skip-nonfinite), last good checkpoint kept"

# 6. inspect
"$moet" checkpoint inspect "$dir/fp32-a" | grep -q "^checksums: all [0-9]* pieces verified" ||
  fail "inspect did not verify"
echo "PASS"
