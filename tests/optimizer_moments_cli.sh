#!/usr/bin/env bash
# The precision-aware optimizer (docs/training.md): --use-precision-aware-optimizer
# --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 stores AdamW's moments in bf16.
# One process (no launcher given):
#  - the header's memory line: the optimizer state is half the fp32 moments' (small-bpe.json);
#  - the checkpoint stores the moments as bf16 (checkpoint.json "dtype": "BF16", inspect says so);
#  - a bf16-moment run resumed from its step-3 checkpoint is bitwise the straight run
#    (moet checkpoint diff), and not the fp32-moment run;
#  - a resume with the other dtype converts, saying so in one line;
#  - refusals: --exp-avg-dtype bf16 without --use-precision-aware-optimizer, an unknown dtype.
# Under a launcher (MPI-LAUNCHER-PREFIX... without the process count): --deterministic with bf16
# moments, 2 ranks x micro-batch 2 with --zero1 equal one process x 4 bitwise, and the 2-rank
# ZeRO-1 checkpoint (each rank's shard of the bf16 moments) resumed in one process continues
# bitwise.
# Usage: optimizer_moments_cli.sh MOET CONFIGS_DIR [MPI-LAUNCHER-PREFIX...]
set -euo pipefail
moet="$1" configs="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/cli_util.sh
source "$(dirname "$0")/cli_util.sh"
same() { "$moet" checkpoint diff "$1" "$2" >"$dir/diff.txt" || fail "$3: $(head -3 "$dir/diff.txt")"; }
bf16=(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
loud=(train --model "$configs/tiny.json" --data mock --seq 32 --eval-batches 0 --threads 1
      --peak-tflops 1)
base=("${loud[@]}" --quiet)

if [ ${#mpi[@]} -gt 0 ]; then
  det=("${base[@]}" "${bf16[@]}" --steps 4 --deterministic --grad-accum 2)
  "$moet" "${det[@]}" --micro-batch 4 --out "$dir/one"
  "${mpi[@]}" 2 "$moet" "${det[@]}" --micro-batch 2 --zero1 --out "$dir/two" --save-every 2
  same "$dir/one" "$dir/two" "--deterministic bf16 moments: 2 ranks --zero1 vs one process"
  grep -q '"dtype": "BF16"' "$dir/two/step-0000002/checkpoint.json" || fail "no BF16 moments"
  stopped_at "$dir/two" 2 "$dir/two-to-one"
  "$moet" "${det[@]}" --micro-batch 4 --out "$dir/two-to-one" --resume auto
  same "$dir/one" "$dir/two-to-one" "2 ranks --zero1 bf16 moments resumed in one process"
  echo "--deterministic bf16 moments: 2 ranks --zero1 = one process; resharded to one: bitwise"
  echo "PASS"
  exit 0
fi

# The memory line: bf16 moments take half of fp32's.
mem=(train --model "$configs/small-bpe.json" --data mock --seq 8 --micro-batch 1 --steps 1
     --threads 1 --peak-tflops 1 --eval-batches 0)
optimizer_mb() { sed -n 's/^memory: .*, optimizer \([0-9]*\).*/\1/p'; }
f32=$("$moet" "${mem[@]}" | optimizer_mb)
line=$("$moet" "${mem[@]}" "${bf16[@]}" | grep '^memory:')
b16=$(printf '%s\n' "$line" | optimizer_mb)
if [ -z "$f32" ] || [ -z "$b16" ]; then fail "no memory line: $line"; fi
if [ $((2 * b16 - f32)) -lt -1 ] || [ $((2 * b16 - f32)) -gt 1 ]; then
  fail "bf16 moments take $b16 MB, fp32 ones $f32 MB: not half"
fi
[[ "$line" == *"optimizer $b16 (bf16 moments; $f32 in fp32)"* ]] || fail "memory line: $line"
echo "memory: optimizer $b16 MB with bf16 moments, $f32 MB with fp32"

# Resume: bitwise the straight run; the checkpoint holds bf16 moments.
run=("${base[@]}" --steps 6 --save-every 3)
"$moet" "${run[@]}" "${bf16[@]}" --out "$dir/a"
stopped_at "$dir/a" 3 "$dir/b"
"$moet" "${run[@]}" "${bf16[@]}" --out "$dir/b" --resume auto
same "$dir/a" "$dir/b" "bf16 moments resumed at step 3"
index="$dir/a/step-0000006/checkpoint.json"
[ "$(grep -c '"dtype": "BF16"' "$index")" -eq "$(grep -c '"adam_[mv]/[^"]*": {' "$index")" ] ||
  fail "not every moment is stored as BF16"
"$moet" checkpoint inspect "$dir/a" | grep -q 'adam_m: .* bf16 | adam_v: .* bf16 | param: .* fp32' ||
  fail "inspect: $("$moet" checkpoint inspect "$dir/a" | grep tensors:)"
"$moet" "${run[@]}" --out "$dir/f32"
if "$moet" checkpoint diff "$dir/a" "$dir/f32" >/dev/null; then
  fail "bf16 moments trained bitwise what fp32 moments train"
fi
echo "resume from step 3 with bf16 moments: bitwise; moments stored as BF16"

# The other dtype on resume converts, in one line (--quiet would hide it).
run=("${loud[@]}" --steps 6 --save-every 3)
stopped_at "$dir/f32" 3 "$dir/f32-to-bf16"
out=$("$moet" "${run[@]}" "${bf16[@]}" --out "$dir/f32-to-bf16" --resume auto 2>&1)
[[ "$out" == *"AdamW moments converted on resume: --exp-avg-dtype bf16: the checkpoint's first moments (fp32) rounded to bf16 (nearest even); --exp-avg-sq-dtype bf16"* ]] ||
  fail "fp32 -> bf16 resume: $out"
stopped_at "$dir/a" 3 "$dir/bf16-to-f32"
out=$("$moet" "${run[@]}" --use-precision-aware-optimizer --exp-avg-dtype bf16 \
  --out "$dir/bf16-to-f32" --resume auto 2>&1)
[[ "$out" == *"converted on resume: --exp-avg-sq-dtype fp32: the checkpoint's second moments (bf16) widened to fp32 (exact)"* ]] ||
  fail "bf16 -> fp32 resume: $out"
echo "resume with the other dtype: converted, one line each"

# Refusals: one line, nothing written.
expect_error "--exp-avg-dtype bf16 needs --use-precision-aware-optimizer" \
  "$moet" "${base[@]}" --exp-avg-dtype bf16 --out "$dir/refused"
expect_error "--exp-avg-sq-dtype bf16 needs --use-precision-aware-optimizer" \
  "$moet" "${base[@]}" --exp-avg-sq-dtype bf16 --out "$dir/refused"
expect_error "fp16" "$moet" "${base[@]}" --use-precision-aware-optimizer --exp-avg-dtype fp16 \
  --out "$dir/refused"
[ ! -e "$dir/refused" ] || fail "a refused run wrote $dir/refused"
echo "refusals: one line each"
echo "PASS"
