#!/usr/bin/env bash
# What a controlled experiment needs from moet train and moet eval (docs/training.md,
# "Experiments"):
#  - --data-seed draws the data order apart from the initialisation (--seed alone sets both):
#    two data seeds under one --seed start from the same weights, two --seeds under one data
#    seed read the same batches;
#  - the held-out loss comes with its standard error (eval_loss_se in the metrics, "±" on the
#    line), and an evaluation at a step --log-every does not print still gets its own line;
#  - moet eval reads a whole external file as held-out data (--split 0,100 --batches all), with
#    a progress line on stderr and the standard error;
#  - a --schedule constant run resumed with more --steps continues (nothing of its schedule
#    changed), a cosine one is still refused;
#  - --config FILE.yaml|json holds any flags, the command line overrides it, run.json keeps it;
#    an unknown key or a nested mapping is refused in one line.
# Usage: experiment_cli.sh MOET CONFIG
set -euo pipefail
moet="$1" config="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export MOET_CACHE_DIR="$dir/cache"
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
run=(train --model "$config" --data mock --seq 32 --micro-batch 2 --threads 1 --peak-tflops 1)
field() { python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2])].get(sys.argv[3]))" "$@"; }

# --data-seed
"$moet" "${run[@]}" --quiet --steps 2 --seed 7 --metrics "$dir/s7.jsonl"
"$moet" "${run[@]}" --quiet --steps 2 --seed 7 --data-seed 7 --metrics "$dir/s7d7.jsonl"
"$moet" "${run[@]}" --quiet --steps 2 --seed 7 --data-seed 8 --metrics "$dir/s7d8.jsonl"
diff <(losses "$dir/s7.jsonl") <(losses "$dir/s7d7.jsonl") >/dev/null ||
  fail "--seed 7 and --seed 7 --data-seed 7 differ"
! diff <(losses "$dir/s7.jsonl") <(losses "$dir/s7d8.jsonl") >/dev/null ||
  fail "--data-seed 8 read the batches of --data-seed 7"
# no update (lr 1e-30 is below every weight's ulp; no bias update): the held-out loss is the initial weights'
frozen=(--quiet --steps 1 --lr 1e-30 --min-lr 0 --warmup 0 --bias-update-rate 0 --eval-batches 2)
"$moet" "${run[@]}" "${frozen[@]}" --seed 7 --data-seed 1 --metrics "$dir/f1.jsonl"
"$moet" "${run[@]}" "${frozen[@]}" --seed 7 --data-seed 2 --metrics "$dir/f2.jsonl"
"$moet" "${run[@]}" "${frozen[@]}" --seed 9 --data-seed 1 --metrics "$dir/f3.jsonl"
[ "$(field "$dir/f1.jsonl" 0 eval_loss)" = "$(field "$dir/f2.jsonl" 0 eval_loss)" ] ||
  fail "two data seeds under one --seed start from other weights"
[ "$(field "$dir/f1.jsonl" 0 eval_loss)" != "$(field "$dir/f3.jsonl" 0 eval_loss)" ] ||
  fail "--seed 9 started from --seed 7's weights"
echo "ok: --data-seed orders the data, --seed alone the weights (and both when alone)"

# the standard error, and evaluations between progress lines
for i in $(seq 1 400); do printf 'Training document %d: the fox, the dog and %d tokens.\n%%\n' "$i" "$i"; done \
  >"$dir/train.txt"
"$moet" "${run[@]/mock/$dir/train.txt}" --steps 6 --log-every 4 --eval-every 3 --eval-batches 4 --out "$dir/r" \
  >"$dir/r.txt"
grep -q "^step 3/6 | eval [0-9.]* ± [0-9.]* (held-out loss)$" "$dir/r.txt" ||
  fail "no line for the evaluation at step 3: $(grep -c . "$dir/r.txt") lines"
se=$(field "$dir/r/metrics.jsonl" 2 eval_loss_se)
python3 -c "import sys; s = float(sys.argv[1]); assert 0 < s < 1, s" "$se" ||
  fail "eval_loss_se at step 3: $se"
echo "ok: held-out loss with its standard error ($se), and a line at step 3 between progress lines"

# moet eval on a whole external file
for i in $(seq 1 200); do printf 'External held-out document %d, about cats and tokens.\n%%\n' "$i"; done \
  >"$dir/ext.txt"
"$moet" eval --checkpoint "$dir/r" --data "$dir/ext.txt" --split 0,100 --batches all \
  >"$dir/ext.out" 2>"$dir/ext.err"
grep -q "loss [0-9.]* ± [0-9.]* (standard error)" "$dir/ext.out" || fail "$(cat "$dir/ext.out")"
grep -q "(0 train, [0-9]* held out)" "$dir/ext.out" || fail "not all held out: $(cat "$dir/ext.out")"
n=$("$moet" eval --checkpoint "$dir/r" --data "$dir/ext.txt" --split 0,100 --batches all --json |
  python3 -c 'import json,sys; j = json.load(sys.stdin); assert j["loss_se"] > 0; print(j["batches"])')
tokens=$(grep -o "[0-9]* tokens in 200 documents" "$dir/ext.out" | cut -d' ' -f1)
[ "$n" -eq $((tokens / 33 / 2)) ] || fail "--batches all evaluated $n batches of $tokens tokens"
grep -q "^moet eval: $n/$n batches, loss [0-9.]*$" "$dir/ext.err" || fail "no progress: $(cat "$dir/ext.err")"
refused "--batches 'x' is neither a positive number nor 'all'" \
  "$moet" eval --checkpoint "$dir/r" --batches x
refused "gives the training split no documents" "$moet" "${run[@]}" --steps 1 --split 0,100
echo "ok: moet eval --split 0,100 --batches all reads a whole external file ($n batches), with progress"

# a constant schedule resumed with more steps
"$moet" "${run[@]}" --quiet --steps 4 --schedule constant --warmup 1 --out "$dir/c"
"$moet" "${run[@]}" --quiet --steps 8 --schedule constant --warmup 1 --out "$dir/c" --resume auto
[ -d "$dir/c/step-0000008" ] || fail "the constant run did not continue to step 8"
"$moet" "${run[@]}" --quiet --steps 4 --out "$dir/k"
refused "the learning-rate schedule differs" \
  "$moet" "${run[@]}" --quiet --steps 8 --out "$dir/k" --resume auto
echo "ok: --schedule constant resumes with more --steps; cosine is refused"

# --config
cat >"$dir/exp.yaml" <<YAML
# an experiment
model: $config
data: mock
steps: 3       # overridden below
micro_batch: 2
seq: 32
threads: 1
peak-tflops: 1
quiet: true
recompute-granularity: selective
recompute-modules: [mla_up_proj, moe_act]
YAML
"$moet" train --config "$dir/exp.yaml" --steps 2 --out "$dir/y"
python3 - "$dir/y/run.json" "$dir/exp.yaml" <<'PY' || fail "run.json does not hold the config's flags"
import json, os, sys
j = json.load(open(sys.argv[1]))
o = j["options"]
assert o["optim"]["steps"] == 2 and o["data"]["micro_batch"] == 2, o
assert o["recompute"]["modules"] == ["mla_up_proj", "moe_act"], o["recompute"]
assert j["config_file"]["path"] == os.path.abspath(sys.argv[2]), j["config_file"]
assert j["config_file"]["text"] == open(sys.argv[2]).read()
PY
printf '{"model": "%s", "data": "mock", "steps": 1, "seq": 32, "micro-batch": 2, "quiet": true, "peak_tflops": 1}\n' \
  "$config" >"$dir/exp.json"
"$moet" train --config "$dir/exp.json" --threads 1 --metrics "$dir/j.jsonl"
[ "$(grep -c '"loss"' "$dir/j.jsonl")" -eq 1 ] || fail "--config FILE.json did not train one step"
printf 'steps: 1\nmicro-batchh: 2\n' >"$dir/bad.yaml"
refused "unknown flag --micro-batchh" "$moet" train --config "$dir/bad.yaml" --model "$config"
printf 'steps:\n  value: 2\n' >"$dir/nested.yaml"
refused "line 2: nested mappings are not flags" "$moet" train --config "$dir/nested.yaml"
echo "ok: --config YAML and JSON, overridden by the command line, kept in run.json; bad ones refused"
