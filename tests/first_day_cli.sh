#!/usr/bin/env bash
# A user's first day with their own data (issue 24), through the command line:
#  - `moet tokenizer train` reads JSONL (and .jsonl.gz, directories, globs) as `moet data
#    prepare` does — the document field, not the JSON syntax: a tokenizer trained on a JSONL
#    corpus is byte for byte the one trained on the same documents as plain text;
#  - JSONL whose documents sit under another key: data prepare, tokenizer train and train say
#    how many lines lacked the field, which keys they had, and that --json-key reads them; with
#    --json-key they read them;
#  - `moet eval --checkpoint RUN` without flags evaluates the run's data in the run's recipe with
#    its batches: an MXFP8 run's logged held-out loss, bit for bit; it says which settings it took
#    and when the held-out part holds fewer batches than asked;
#  - a resume whose --steps, --lr, --min-lr, --warmup or --schedule would change the run's
#    learning-rate schedule is refused in one line (Megatron's --override-opt-param-scheduler
#    accepts it, and the schedule that results is printed);
#  - a model that cannot fit in this machine's memory is refused in one line in GB, before it is
#    built, pointing to moet plan;
#  - --out RUN alone writes RUN/metrics.jsonl (so moet report RUN works), --tensorboard without a
#    directory writes RUN/tensorboard, and --metrics and data prepare --output make missing folders;
#  - every periodic save prints a line; a resumed run's report keeps every invocation; the report
#    of a metrics file FILE.jsonl is FILE.html;
#  - Megatron's names of moet's flags (--train-iters, --global-batch-size, --bf16, ...) are
#    answered with moet's.
# Usage: first_day_cli.sh MOET CONFIG
set -euo pipefail
moet="$1" config="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export MOET_CACHE_DIR="$dir/cache"
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"

# ---- the tokenizer reads JSONL as data prepare does
python3 - "$dir" <<'PY'
import gzip, json, sys
d = sys.argv[1]
docs = [f"An apple a day, number {i}, keeps the doctor away; an orange helps too." for i in range(400)]
with open(f"{d}/c.jsonl", "w") as f:
    for t in docs:
        f.write(json.dumps({"text": t, "id": 7}) + "\n")
with gzip.open(f"{d}/c.jsonl.gz", "wt") as f:
    for t in docs:
        f.write(json.dumps({"text": t}) + "\n")
with open(f"{d}/c.txt", "w") as f:
    for t in docs:
        f.write(t + "\n%\n")
with open(f"{d}/k.jsonl", "w") as f:
    for t in docs:
        f.write(json.dumps({"content": t, "id": 1}) + "\n")
PY
for src in c.jsonl c.jsonl.gz c.txt; do
  "$moet" tokenizer train --input "$dir/$src" --vocab-size 400 --output "$dir/tok-$src.json" \
    >"$dir/tok.out" || fail "tokenizer train $src: $(cat "$dir/tok.out")"
done
cmp -s "$dir/tok-c.jsonl.json" "$dir/tok-c.txt.json" ||
  fail "a tokenizer trained on JSONL differs from one trained on the same documents as text"
cmp -s "$dir/tok-c.jsonl.gz.json" "$dir/tok-c.txt.json" || fail ".jsonl.gz read differently"
python3 - "$dir/tok-c.jsonl.json" <<'PY' || fail "the JSONL-trained vocabulary learned JSON syntax"
import json, sys
merges = json.load(open(sys.argv[1]))["model"]["merges"]
pieces = ["".join(m.split(" ")) if isinstance(m, str) else "".join(m) for m in merges]
bad = [p for p in pieces if '{"' in p or '":' in p or '"}' in p or p in ("text", "Ġtext")]
assert not bad, bad
PY
ids=$("$moet" tokenizer encode --tokenizer "$dir/tok-c.jsonl.json" --text "An apple" --ids-only)
[ "$(wc -w <<<"$ids")" -le 2 ] || fail "'An apple' takes $(wc -w <<<"$ids") tokens: $ids"
echo "tokenizer train: JSONL, .jsonl.gz and text give the same tokenizer; no JSON syntax learned"

# ---- documents under another key
want='400 JSONL lines have no "text" field (their keys: content, id); --json-key content reads them'
expect_error "$want" "$moet" tokenizer train --input "$dir/k.jsonl" --vocab-size 300 --output "$dir/t2.json"
[ ! -e "$dir/t2.json" ] || fail "a refused tokenizer train wrote its output"
expect_error "$want" "$moet" data prepare --input "$dir/k.jsonl" --output "$dir/k" --no-progress
[ ! -e "$dir/k.bin" ] || fail "a refused data prepare wrote its output"
expect_error "$want" "$moet" train --model "$config" --data "$dir/k.jsonl" --steps 1 --quiet
"$moet" tokenizer train --input "$dir/k.jsonl" --json-key content --vocab-size 400 \
  --output "$dir/tok-k.json" >/dev/null
cmp -s "$dir/tok-k.json" "$dir/tok-c.txt.json" || fail "--json-key content read other documents"
"$moet" data prepare --input "$dir/k.jsonl" --json-key content --output "$dir/k" --no-progress |
  grep -q "400 documents" || fail "data prepare --json-key content"
"$moet" train --model "$config" --data "$dir/k.jsonl" --json-key content --steps 1 --quiet \
  --eval-batches 0 >"$dir/train.out" 2>&1 || fail "train --json-key content: $(cat "$dir/train.out")"
# some lines with the key, some without: trained on those with it, the others named in a warning
{ head -3 "$dir/c.jsonl"; head -2 "$dir/k.jsonl"; } >"$dir/mixed.jsonl"
err=$("$moet" data prepare --input "$dir/mixed.jsonl" --output "$dir/m" --no-progress 2>&1)
[[ "$err" == *"3 documents"*'2 JSONL lines have no "text" field'* ]] || fail "mixed: $err"
echo "JSONL under another key: the refusal names the keys and --json-key; --json-key reads them"
# ---- moet eval --checkpoint RUN evaluates what the run evaluated
"$moet" train --model "$config" --data "$dir/c.txt" --steps 4 --precision mxfp8 --out "$dir/run" \
  --metrics "$dir/run.jsonl" --quiet >/dev/null
logged=$(python3 -c "import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]['eval_loss']))" "$dir/run.jsonl")
"$moet" eval --checkpoint "$dir/run" --json >"$dir/eval.json" || fail "eval: $(cat "$dir/eval.json")"
got=$(python3 -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['loss']))" "$dir/eval.json")
[ "$logged" = "$got" ] || fail "moet eval of an mxfp8 run gives $got, the run logged $logged"
grep -q '"precision":"mxfp8"' "$dir/eval.json" || fail "eval not in the run's recipe: $(cat "$dir/eval.json")"
grep -q "$dir/c.txt" "$dir/run/step-0000004/checkpoint.json" || fail "the checkpoint records no data"
out=$("$moet" eval --checkpoint "$dir/run")
[[ "$out" == *"as the run evaluated"*"--data $dir/c.txt"*"--precision mxfp8"* ]] ||
  fail "eval does not say it took the run's settings: $out"
[[ "$out" == *"text data: $dir/c.txt, "*" tokens in 400 documents"* ]] || fail "eval's data: $out"
out=$("$moet" eval --checkpoint "$dir/run" --batches 500 --precision fp32)
[[ "$out" == *"(500 asked: the held-out part holds only "*" batches of 8 x 64)"* ]] ||
  fail "fewer batches than asked, silently: $out"
[[ "$out" == *", fp32; "* ]] || fail "--precision fp32 not taken: $out"
# the same for a 4-bit run (its forward rounds to nearest-even: nothing random to replay)
"$moet" train --model "$config" --data "$dir/c.txt" --steps 2 --precision nvfp4 --out "$dir/run4" \
  --metrics "$dir/run4.jsonl" --quiet >/dev/null
logged=$(python3 -c "import json,sys; print(repr([json.loads(l) for l in open(sys.argv[1])][-1]['eval_loss']))" "$dir/run4.jsonl")
got=$("$moet" eval --checkpoint "$dir/run4" --json | python3 -c "import json,sys; print(repr(json.load(sys.stdin)['loss']))")
[ "$logged" = "$got" ] || fail "moet eval of an nvfp4 run gives $got, the run logged $logged"
echo "moet eval --checkpoint RUN: the run's data and recipe, its logged held-out loss bit for bit"

# ---- resuming under another learning-rate schedule is refused unless asked for
"$moet" train --model "$config" --data mock --steps 4 --out "$dir/sched" --quiet --eval-batches 0
before=$(ls -R "$dir/sched" | md5sum)
expect_error "--steps 4 -> 12, warm-up 0 -> 1 steps); pass --override-opt-param-scheduler" \
  "$moet" train --model "$config" --data mock --steps 12 --out "$dir/sched" --resume auto --quiet
expect_error "--lr 0.001 -> 0.002, --min-lr 0.0001 -> 0.0002); pass --override-opt-param-scheduler" \
  "$moet" train --model "$config" --data mock --steps 4 --lr 2e-3 --out "$dir/sched" --resume auto
[ "$before" = "$(ls -R "$dir/sched" | md5sum)" ] || fail "a refused resume changed the run directory"
out=$("$moet" train --model "$config" --data mock --steps 12 --out "$dir/sched" --resume auto \
  --override-opt-param-scheduler --eval-batches 0 --log-every 100)
[[ "$out" == *"the learning-rate schedule changes at step 4"*"was cosine 0.001 -> 0.0001, warm-up 0 steps, decay to step 4, now cosine 0.001 -> 0.0001, warm-up 1 steps, decay to step 12"* ]] ||
  fail "an accepted schedule change is not printed: $out"
echo "resume: another schedule refused, naming the change and --override-opt-param-scheduler"

# ---- a model that cannot fit is refused before anything is allocated
big="$(dirname "$config")/deepseek-v3-671b.json"
expect_error "parameters: training keeps at least 16 bytes of each" \
  "$moet" train --model "$big" --data mock --steps 1 --out "$dir/big"
err=$("$moet" train --model "$big" --data mock --steps 1 2>&1 || true)
[[ "$err" == *" GB, and this machine has "*" GB; plan a cluster run with moet plan --model "* ]] ||
  fail "the refusal does not compare in GB or point to moet plan: $err"
[ ! -e "$dir/big" ] || fail "a refused run left its --out"
echo "a model that cannot fit: refused in one line, in GB, pointing to moet plan"

# ---- the run directory as the run's home
"$moet" train --model "$config" --data mock --steps 3 --out "$dir/home" --tensorboard --quiet \
  --eval-batches 0
[ -s "$dir/home/metrics.jsonl" ] || fail "--out RUN wrote no RUN/metrics.jsonl"
ls "$dir/home/tensorboard/"events.out.tfevents.* >/dev/null 2>&1 ||
  fail "--tensorboard without a directory wrote nothing under RUN/tensorboard"
"$moet" report "$dir/home" >/dev/null || fail "moet report RUN after a run with --out"
[ -s "$dir/home/report.html" ] || fail "no report.html"
expect_error "--tensorboard without a directory writes into the run directory: give --out RUN" \
  "$moet" train --model "$config" --data mock --steps 1 --tensorboard
"$moet" train --model "$config" --data mock --steps 1 --metrics "$dir/new/folder/m.jsonl" --quiet
[ -s "$dir/new/folder/m.jsonl" ] || fail "--metrics did not create its folder"
"$moet" data prepare --input "$dir/c.txt" --output "$dir/new/data/c" --no-progress >/dev/null
[ -s "$dir/new/data/c.bin" ] || fail "data prepare --output did not create its folder"
echo "--out RUN: RUN/metrics.jsonl and RUN/tensorboard by default; missing folders are made"

# ---- periodic saves say so; a resumed run's report keeps every invocation; a file's report
out=$("$moet" train --model "$config" --data mock --steps 4 --save-every 2 --out "$dir/saves" \
  --eval-batches 0 --log-every 100)
[[ "$out" == *"checkpoint: step 2 -> $dir/saves/step-0000002 (the step waited "*" s; written in the background)"* ]] ||
  fail "a periodic save printed nothing: $out"
"$moet" train --model "$config" --data mock --steps 6 --save-every 2 --out "$dir/saves" \
  --eval-batches 0 --resume auto --override-opt-param-scheduler --quiet
"$moet" report "$dir/saves" >/dev/null
grep -q ">first start<" "$dir/saves/report.html" && grep -q ">resume 1<" "$dir/saves/report.html" &&
  grep -q -- "--steps 4 --save-every 2" "$dir/saves/report.html" ||
  fail "the report of a resumed run does not keep the first invocation"
cp "$dir/saves/metrics.jsonl" "$dir/loose.jsonl"
"$moet" report "$dir/loose.jsonl" | grep -q "report: $dir/loose.html" || fail "a file's report is not named after it"
[ -s "$dir/loose.html" ] || fail "no $dir/loose.html"
echo "saves print a line each; a resumed run's report keeps every command; FILE.jsonl -> FILE.html"

# ---- Megatron's flag names get a pointer to moet's
for pair in --train-iters:--steps --micro-batch-size:--micro-batch --seq-length:--seq \
  --lr-warmup-iters:--warmup --save-interval:--save-every --load:--resume \
  --tensorboard-dir:--tensorboard --eval-interval:--eval-every --eval-iters:--eval-batches \
  --expert-model-parallel-size:--ep --pipeline-model-parallel-size:--pp; do
  expect_error "unknown flag ${pair%%:*} (Megatron's name: moet calls it ${pair##*:})" \
    "$moet" train --model "$config" "${pair%%:*}" 4
done
for flag in --global-batch-size --bf16 --fp8-recipe; do
  expect_error "unknown flag $flag (Megatron's name: moet's" "$moet" train --model "$config" $flag 4
done
echo "Megatron's flag names: each names moet's"
echo PASS
