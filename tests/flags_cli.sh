#!/usr/bin/env bash
# Every numeric flag of the moet command line refuses NaN, Inf, negative and out-of-range values,
# and the combinations that cannot work are refused up front (docs/training.md, "Flags"). Each
# refusal: a non-zero exit, exactly one line on stderr that names the flag and carries no source
# location, and nothing created or changed on disk (a refused `moet train --out --metrics
# --tensorboard --trace` leaves no file or directory behind and never touches existing ones).
# Bad flags are refused before a model is built, so this takes seconds.
# With MPIEXEC [FLAGS...] after SOURCE_DIR (label mpi), the layouts that do not fit 2 ranks
# instead: refused on every rank before any collective, the line printed once (by rank 0), no
# MPI_ABORT banner, nothing created (Open MPI's notice of a non-zero exit status remains).
# Usage: flags_cli.sh MOET SOURCE_DIR [MPIEXEC FLAGS...]
set -euo pipefail
moet=$1
root=$2
shift 2
mpi=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
export OMP_NUM_THREADS=1
export MOET_CACHE_DIR="$tmp/cache"
config="$root/configs/tiny.json"
work="$tmp/work"  # where refused commands would write; nothing may appear or change here
mkdir -p "$work"
echo precious >"$work/existing.jsonl"
snapshot() { (cd "$work" && find . -printf '%p %s %T@\n' | sort); }
before=$(snapshot)
checks=0

# refuse FLAG COMMAND...: non-zero exit, one stderr line naming FLAG without a source location,
# nothing new or changed under $work.
refuse() {
  local flag="$1" err
  shift
  err=$(mktemp)
  if (cd "$work" && "$@") >/dev/null 2>"$err"; then
    rm -f "$err"
    fail "accepted: $*"
  fi
  local got
  got=$(cat "$err")
  rm -f "$err"
  [ -n "$got" ] || fail "'$*': nothing on stderr"
  [ "$(printf '%s\n' "$got" | wc -l)" -eq 1 ] || fail "'$*': not one line: $got"
  [[ "$got" == *"$flag"* ]] || fail "'$*': the line does not name $flag: $got"
  [[ "$got" != *".cpp"* && "$got" != *".h:"* ]] || fail "'$*': a source file in: $got"
  if printf '%s' "$got" | grep -Eq '\[[^] ]+:[0-9]+\]'; then fail "'$*': a location in: $got"; fi
  [ "$(snapshot)" = "$before" ] || fail "'$*' left files behind: $(snapshot)"
  checks=$((checks + 1))
}

if [ ${#mpi[@]} -gt 0 ]; then
  mpi_refuse() {  # mpi_refuse TEXT FLAGS...: 2 ranks of moet train fail, saying TEXT, writing nothing
    local want="$1" out
    shift
    if out=$(cd "$work" && timeout 120 "${mpi[@]}" 2 "$moet" train --model "$config" --data mock \
      --steps 2 --micro-batch 2 --seq 16 --quiet --peak-tflops 1 --out run --metrics m.jsonl \
      --tensorboard tb --trace t.json "$@" 2>&1); then
      fail "accepted on 2 ranks: $*"
    fi
    [[ "$out" == *"$want"* ]] || fail "2 ranks, $*: wanted '$want', got: $out"
    [ "$(grep -c '^moet' <<<"$out")" -eq 1 ] || fail "2 ranks, $*: not one moet line: $out"
    if grep -q 'MPI_ABORT' <<<"$out"; then fail "2 ranks, $*: an abort banner: $out"; fi
    [ "$(snapshot)" = "$before" ] || fail "2 ranks, $* left files behind: $(snapshot)"
  }
  mpi_refuse "--ep 3 does not divide the 2 ranks" --ep 3
  mpi_refuse "--pp 3 does not divide the 2 ranks" --pp 3
  mpi_refuse "--ep 2 does not divide the 1 ranks of a pipeline stage" --pp 2 --ep 2
  mpi_refuse "--ep-ranks-per-node 3 must divide --ep 2" --ep 2 --ep-ranks-per-node 3
  mpi_refuse "do not split evenly" --pp 2
  echo "flags_cli (2 ranks): bad layouts refused, nothing written"
  exit 0
fi

# --------------------------------------------------------------------------- moet train
train=("$moet" train --model "$config" --data mock --steps 4 --micro-batch 2 --seq 16 --quiet
  --peak-tflops 1 --out run --metrics metrics.jsonl --tensorboard tb --trace trace.json)

# floating-point flags: finite and >= 0 (--lr and --peak-tflops: > 0)
for flag in --lr --min-lr --weight-decay --grad-clip --mtp-lambda --balance-alpha --z-loss \
  --bias-update-rate --peak-tflops; do
  for v in nan NaN inf -inf -1 1e400; do refuse "$flag" "${train[@]}" "$flag" "$v"; done
done
refuse --lr "${train[@]}" --lr 0
refuse --peak-tflops "${train[@]}" --peak-tflops 0
refuse --min-lr "${train[@]}" --lr 1e-3 --min-lr 0.01  # above --lr
refuse --weight-decay "${train[@]}" --lr 0.1 --weight-decay 10  # lr x wd >= 1 flips the weights

# integer flags: each value below its least, and text that is no integer
declare -A least=([--steps]=1 [--micro-batch]=1 [--seq]=2 [--grad-accum]=1 [--warmup]=0
  [--threads]=0 [--prefetch]=0 [--bf16-layers]=0 [--bf16-layers-end]=0 [--log-every]=1 [--log-expert-load]=0
  [--eval-every]=0 [--eval-batches]=0 [--ep]=1 [--ep-ranks-per-node]=0 [--pp]=1 [--vpp]=1
  [--save-every]=0 [--keep-last]=0 [--skip-nonfinite]=0 [--seed]=0)
for flag in "${!least[@]}"; do
  refuse "$flag" "${train[@]}" "$flag" $((least[$flag] - 1))
  refuse "$flag" "${train[@]}" "$flag" -5
  for v in nan inf 1.5 x; do refuse "$flag" "${train[@]}" "$flag" "$v"; done
done
# above the range
refuse --warmup "${train[@]}" --steps 4 --warmup 5
refuse --prefetch "${train[@]}" --prefetch 100000
refuse --threads "${train[@]}" --threads 5000
refuse --steps "${train[@]}" --steps 99999999999999999999  # CLI11 saturates it to 2^63 - 1
refuse --grad-accum "${train[@]}" --grad-accum 9223372036854775807
refuse --micro-batch "${train[@]}" --micro-batch 100000000 --grad-accum 100
refuse --seq "${train[@]}" --seq 100000  # beyond max_position_embeddings
# words
refuse --schedule "${train[@]}" --schedule linear
refuse --overlap "${train[@]}" --overlap maybe
refuse --dispatcher "${train[@]}" --dispatcher ring
refuse --precision "${train[@]}" --precision fp7
# Megatron's FP4 spelling (megatron_precision_flags.h): what Megatron would not run, or what
# contradicts moet's own flags
refuse --fp4-format "${train[@]}" --fp4-recipe nvfp4
refuse --fp4-format "${train[@]}" --fp4-format e4m3 --fp4-recipe nvfp4
refuse --fp4-recipe "${train[@]}" --fp4-format e2m1
refuse --fp4-recipe "${train[@]}" --fp4-format e2m1 --fp4-recipe fp4
refuse --fp4-recipe "${train[@]}" --precision mxfp8 --fp4-format e2m1 --fp4-recipe nvfp4
refuse --first-last-layers-bf16 "${train[@]}" --fp4-format e2m1 --fp4-recipe nvfp4 \
  --num-layers-at-end-in-bf16 2
refuse --doc-boundary "${train[@]}" --doc-boundary never
refuse --stpes "${train[@]}" --stpes 3  # a mistyped flag: the line names it (and --steps)
for v in nan,5 -1,5 95 x 0,5; do refuse --split "${train[@]}" --split "$v"; done

# combinations that cannot work
refuse --a2a-overlap "${train[@]}" --a2a-overlap --micro-batch 3
refuse --deterministic "${train[@]}" --deterministic --a2a-overlap
refuse --ep "${train[@]}" --ep 2           # needs mpirun
refuse --pp "${train[@]}" --pp 2           # needs mpirun
refuse --zero1 "${train[@]}" --zero1       # needs mpirun
refuse --vpp "${train[@]}" --vpp 2         # needs --pp
refuse --pp-layout "${train[@]}" --pp-layout "Et|tL"
refuse --log-expert-load "${train[@]}" --log-expert-load 1 --pp 2
refuse --resume "${train[@]}" --resume auto --init-from x
no_out=("$moet" train --model "$config" --data mock --steps 4 --micro-batch 2 --seq 16 --quiet)
refuse --save-every "${no_out[@]}" --save-every 2
refuse --keep-last "${no_out[@]}" --keep-last 2
refuse --resume "${no_out[@]}" --resume auto
# existing outputs are refused before anything else is created (--out, --tensorboard, --trace new)
refuse --metrics "${train[@]}" --metrics existing.jsonl
refuse --overwrite "${train[@]}" --metrics existing.jsonl  # the flag that would allow it
refuse --metrics "${train[@]}" --metrics existing.jsonl/m.jsonl  # a file where a folder would be
refuse --metrics "${train[@]}" --metrics .
refuse --trace "${train[@]}" --trace existing.jsonl/t.json
refuse --tensorboard "${train[@]}" --tensorboard existing.jsonl
refuse --out "${train[@]}" --out existing.jsonl
echo '{}' >"$work/old.json"
before=$(snapshot)
refuse --trace "${train[@]}" --trace old.json
refuse --overwrite "${train[@]}" --trace old.json
# a data vocabulary larger than the model's (258 ids for tiny's 257), before any text is read
printf 'some text to train on\n%%\nand more\n' >"$tmp/text.txt"
"$moet" tokenizer train --input "$tmp/text.txt" --vocab-size 258 --output "$tmp/tok258.json" \
  >/dev/null
refuse vocab_size "${train[@]/mock/$tmp/text.txt}" --tokenizer "$tmp/tok258.json"
[ "$(cat "$work/existing.jsonl")" = precious ] || fail "existing.jsonl changed"

# the edges of the ranges are accepted, and the metrics and trace may go into the new run directory
ok="$tmp/ok"
mkdir "$ok"
(cd "$ok" && "$moet" train --model "$config" --data mock --steps 2 --micro-batch 2 --seq 16 --quiet \
  --peak-tflops 1e-3 --lr 1e-3 --min-lr 1e-3 --warmup 2 --weight-decay 0 --grad-clip 0 \
  --mtp-lambda 0 --balance-alpha 0 --z-loss 0 --bias-update-rate 0 --prefetch 0 --seed 0 \
  --eval-batches 0 --out run --metrics run/metrics.jsonl --trace run/trace.json >/dev/null) ||
  fail "a run at the edges of the ranges was refused"
[ -s "$ok/run/metrics.jsonl" ] && [ -s "$ok/run/trace.json" ] || fail "no metrics or trace in run/"

# --------------------------------------------------------------------------- other commands
ck="$tmp/no-checkpoint"  # bad flags are refused before the checkpoint is looked at
for v in nan inf -1; do refuse --temperature "$moet" generate --checkpoint "$ck" --temperature "$v"; done
for v in nan 0 1.5 -1; do refuse --top-p "$moet" generate --checkpoint "$ck" --top-p "$v"; done
for v in -1 nan; do refuse --top-k "$moet" generate --checkpoint "$ck" --top-k "$v"; done
for v in 0 -1 nan; do
  refuse --max-new-tokens "$moet" generate --checkpoint "$ck" --max-new-tokens "$v"
done
refuse --threads "$moet" generate --checkpoint "$ck" --threads -1
refuse --seed "$moet" generate --checkpoint "$ck" --seed -1

for flag in --batches --micro-batch --seq; do
  for v in 0 -1 nan; do refuse "$flag" "$moet" eval --checkpoint "$ck" "$flag" "$v"; done
done
refuse --threads "$moet" eval --checkpoint "$ck" --threads -1
refuse --seed "$moet" eval --checkpoint "$ck" --seed -1
refuse --split "$moet" eval --checkpoint "$ck" --split nan,5
refuse --doc-boundary "$moet" eval --checkpoint "$ck" --doc-boundary never
for v in 0 -1 nan; do
  refuse --max-shard-bytes "$moet" export-hf "$ck" out --max-shard-bytes "$v"
done
refuse --seed "$moet" import-hf "$ck" out --seed -1
refuse OUT_CKPT "$moet" import-hf "$ck" existing.jsonl  # never replaced

sim=("$moet" simulate --model "$config" --system h100-sxm --gpus 8 --gbs 8)
for flag in --seq --tp --pp --vpp --ep --etp --mbs; do
  for v in 0 -1 nan; do refuse "$flag" "${sim[@]}" "$flag" "$v"; done
done
for v in 0 -1 nan; do refuse --gpus "$moet" simulate --model "$config" --system h100-sxm \
  --gbs 8 --gpus "$v"; done
refuse --gbs "${sim[@]}" --gbs 0
refuse --mtp "${sim[@]}" --mtp -1
for v in nan inf 0.5 -1; do refuse --expert-imbalance "${sim[@]}" --expert-imbalance "$v"; done
plan=("$moet" plan --model "$config" --system h100-sxm --gpus 8 --gbs 8)
for flag in --gpus --gbs --top --seq; do
  for v in 0 -1 nan; do refuse "$flag" "${plan[@]}" "$flag" "$v"; done
done
refuse --mtp "${plan[@]}" --mtp -2

# moet bench would measure this machine for minutes: only refusals here
refuse --threads "$moet" bench --out x.json --threads -1
refuse --ranks-per-node "$moet" bench --out x.json --ranks-per-node -1 --link-gbps 1
for v in nan inf -1; do refuse --link-gbps "$moet" bench --out x.json --link-gbps "$v" \
  --ranks-per-node 2; done
bench=("$moet" bench --model "$config" --json x.json)
refuse --micro-batch "${bench[@]}" --micro-batch 0
refuse --seq "${bench[@]}" --seq 1
refuse --steps "${bench[@]}" --steps 0
refuse --warmup "${bench[@]}" --warmup -1
refuse --bf16-layers "${bench[@]}" --bf16-layers -1
refuse --bf16-layers-end "${bench[@]}" --bf16-layers-end -1
refuse --precision "${bench[@]}" --precision fp7
refuse --threads "${bench[@]}" --threads -1
echo '{}' >"$work/x.json"
before=$(snapshot)
refuse --overwrite "${bench[@]}"  # --json x.json exists

tok=("$moet" tokenizer train --input "$tmp/text.txt" --output tok.json)
for v in 0 -1 nan 3000000; do refuse --vocab-size "${tok[@]}" --vocab-size "$v"; done
refuse --vocab-size "${tok[@]}" --vocab-size 100  # fewer than the special tokens + 256 bytes
for v in 0 -1; do refuse --min-frequency "${tok[@]}" --vocab-size 300 --min-frequency "$v"; done
refuse --threads "${tok[@]}" --vocab-size 300 --threads -1
refuse --threads "$moet" tokenizer encode --input "$tmp/text.txt" --threads -1
for v in -1 5000 nan; do
  refuse --workers "$moet" data prepare --input "$tmp/text.txt" --output prefix --workers "$v"
done
refuse --doc-boundary "$moet" data prepare --input "$tmp/text.txt" --output prefix \
  --doc-boundary never
refuse --doc "$moet" data inspect prefix --doc -1

echo "flags_cli: $checks refusals, each one line naming its flag, nothing written"
