#!/usr/bin/env bash
# The forgiving command line (docs/training.md, "Flags"; docs/data.md):
# - a mistyped flag of every command (each found in its --help) names the flag it is nearest to,
#   and a mistyped command names the nearest command;
# - every output that exists is refused in one line naming --overwrite, and --overwrite (or the
#   older --overwrite-metrics) replaces it; an empty metrics or trace file (what a run killed
#   before its first step leaves) never blocks the rerun;
# - --threads above the cores this process may use: one warning line, and the run goes on;
# - a model whose max_position_embeddings is below the default --seq: the default follows it in
#   one announced line; a --seq too long is refused naming the largest valid one;
# - plain text: --doc-boundary percent (default) / blank-line / file decide where documents end,
#   a text file holding one document is warned about, binary files of a directory are skipped
#   with one warning line.
# Usage: cli_forgiving.sh MOET CONFIG
set -euo pipefail
moet=$1
config=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
export OMP_NUM_THREADS=1
cd "$tmp"

# ------------------------------------------------------------------ did you mean ...?
expect_error "unknown flag --stpes (did you mean --steps?)" "$moet" train --stpes 10
expect_error "unknown flag --modle (did you mean --model?)" "$moet" train --modle "$config"
expect_error "unknown flag --xyzzy (see moet train --help)" "$moet" train --model "$config" --xyzzy
# a value that starts with '-' is not taken for a flag
expect_error "unknown flag --stpes" "$moet" train --lr -1 --stpes 3
set +e
"$moet" train --stpes 10 2>/dev/null
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a mistyped flag exits $rc, not 2"
# every flag of every command: the longest one, less its third letter, is recognised
leaves=()
for cmd in $("$moet" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print $1}'); do
  subs=$("$moet" "$cmd" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print $1}')
  if [ -z "$subs" ]; then
    leaves+=("$cmd")
  else
    for s in $subs; do leaves+=("$cmd $s"); done
  fi
done
[ "${#leaves[@]}" -ge 16 ] || fail "only ${#leaves[@]} commands found: ${leaves[*]}"
for leaf in "${leaves[@]}"; do
  # shellcheck disable=SC2086
  flag=$("$moet" $leaf --help | grep -oE '^  (-[a-zA-Z],)?--[a-z0-9-]+' | sed 's/.*--/--/' |
    grep -v '^--help$' | awk '{print length, $0}' | sort -k1,1nr -k2 | head -1 | cut -d' ' -f2 ||
    true)
  [ -n "$flag" ] || continue  # a command without flags of its own
  typo="${flag:0:4}${flag:5}"
  # shellcheck disable=SC2086
  expect_error "unknown flag $typo (did you mean $flag?)" "$moet" $leaf "$typo"
  suggested=$((${suggested:-0} + 1))
done
[ "$suggested" -ge 14 ] || fail "suggestions checked for only $suggested commands"
expect_error "unknown command 'trian' (did you mean 'train'? commands: train, simulate" "$moet" trian
expect_error "unknown command 'data prepar' (did you mean 'data prepare'? commands: prepare, inspect" \
  "$moet" data prepar --input x
expect_error "unknown command 'zzzzzzzz' (commands: train," "$moet" zzzzzzzz

# ------------------------------------------------------------------ --overwrite
train=("$moet" train --model "$config" --data mock --steps 1 --micro-batch 2 --seq 16 --quiet
  --peak-tflops 1 --eval-batches 0 --threads 1)
echo precious >m.jsonl
expect_error "pass --overwrite" "${train[@]}" --metrics m.jsonl
[ "$(cat m.jsonl)" = precious ] || fail "a refused run changed the metrics file"
"${train[@]}" --metrics m.jsonl --overwrite >/dev/null
grep -q '"step":1' m.jsonl || fail "--overwrite did not replace the metrics file"
echo precious >m.jsonl
"${train[@]}" --metrics m.jsonl --overwrite-metrics >/dev/null
grep -q '"step":1' m.jsonl || fail "--overwrite-metrics no longer replaces the metrics file"
: >empty.jsonl  # a run killed before its first step leaves its metrics file empty
"${train[@]}" --metrics empty.jsonl >/dev/null || fail "an empty metrics file blocked the run"
grep -q '"step":1' empty.jsonl || fail "no metrics written over the empty file"
echo '{}' >t.json
expect_error "pass --overwrite" "${train[@]}" --trace t.json
"${train[@]}" --trace t.json --overwrite >/dev/null
grep -q traceEvents t.json || fail "--overwrite did not replace the trace"
: >t2.json
"${train[@]}" --trace t2.json >/dev/null || fail "an empty trace file blocked the run"
# the other commands' outputs: each refusal names --overwrite
printf 'a first document\n%%\na second one\n%%\nand a third\n' >docs.txt
echo keep >tok.json
expect_error "--overwrite" "$moet" tokenizer train --input docs.txt --vocab-size 300 --output tok.json
"$moet" data prepare --input docs.txt --output prep --no-progress >/dev/null
expect_error "--overwrite" "$moet" data prepare --input docs.txt --output prep --no-progress
"$moet" data prepare --input docs.txt --output prep --no-progress --overwrite >/dev/null
mkdir hf && echo x >hf/config.json
expect_error "--overwrite" "$moet" export-hf no-such-run hf
echo x >dump.safetensors
expect_error "--overwrite" "$moet" eval --checkpoint no-such-run --dump dump.safetensors
echo '<html>' >r.html
expect_error "--overwrite" "$moet" report m.jsonl --out r.html
echo '{}' >prof.json
expect_error "--overwrite" "$moet" bench --model "$config" --json prof.json
[ "$(cat tok.json)" = keep ] && [ "$(cat hf/config.json)" = x ] && [ "$(cat r.html)" = '<html>' ] ||
  fail "a refused command changed its output"

# ------------------------------------------------------------------ --threads above the cores
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc heeds OMP_NUM_THREADS
err=$("${train[@]}" --threads $((cores + 1)) 2>&1 >/dev/null) || fail "--threads $((cores + 1)) refused"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "not one warning line: $err"
[[ "$err" == "moet: warning: --threads $((cores + 1)) is more than the $cores core"* ]] ||
  fail "no --threads warning: $err"
err=$("${train[@]}" --threads "$cores" 2>&1 >/dev/null)
[ -z "$err" ] || fail "a warning for --threads $cores: $err"

# ------------------------------------------------------------------ --seq and the model
# tiny.json: max_position_embeddings 64, below the default --seq 256
out=$("$moet" train --model "$config" --data mock --steps 1 --micro-batch 2 --peak-tflops 1 \
  --eval-batches 0 --threads 1)
[ "$(grep -c 'moet train: --seq 64, the model' <<<"$out")" -eq 1 ] ||
  fail "the adapted --seq was not announced once: $out"
out=$("$moet" train --model "$config" --data mock --steps 1 --micro-batch 2 --peak-tflops 1 \
  --eval-batches 0 --threads 1 --seq 32)
[[ "$out" != *"--seq 64"* ]] || fail "a given --seq was changed: $out"
expect_error "--seq 65 exceeds the model's max_position_embeddings (64): the largest valid --seq is 64" \
  "${train[@]}" --seq 65

# ------------------------------------------------------------------ documents of plain text
printf 'first document\nstill the first\n\nsecond document\n\n\nthird\n' >blank.txt
docs() {  # docs FILE FLAGS...: the documents moet data prepare finds
  rm -f d.bin d.idx
  "$moet" data prepare --input "$1" --output d --no-progress "${@:2}" 2>/dev/null |
    grep -o '[0-9]* documents' | cut -d' ' -f1
}
[ "$(docs docs.txt)" = 3 ] || fail "percent (the default): not 3 documents"
[ "$(docs blank.txt --doc-boundary blank-line)" = 3 ] || fail "blank-line: not 3 documents"
[ "$(docs blank.txt)" = 1 ] || fail "blank.txt under percent: not 1 document"
mkdir corpus
cp docs.txt blank.txt corpus/
[ "$(docs corpus --doc-boundary file)" = 2 ] || fail "file: not one document per file"
# a text file that is one document under the rule is warned about (data prepare and train)
err=$("$moet" data prepare --input blank.txt --output d --no-progress --overwrite 2>&1 >/dev/null)
[[ "$err" == "moet: warning: 'blank.txt' holds a single document under --doc-boundary percent"* ]] ||
  fail "no single-document warning from data prepare: $err"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "not one warning line: $err"
text_train=("$moet" train --model "$config" --steps 1 --micro-batch 2 --seq 16 --quiet
  --peak-tflops 1 --eval-batches 0 --threads 1 --split 100,0)
err=$("${text_train[@]}" --data blank.txt 2>&1 >/dev/null)
[[ "$err" == *"'blank.txt' holds a single document under --doc-boundary percent"* ]] ||
  fail "no single-document warning from train: $err"
err=$("${text_train[@]}" --data blank.txt --doc-boundary blank-line 2>&1 >/dev/null)
[ -z "$err" ] || fail "train --doc-boundary blank-line warned: $err"
err=$("$moet" data prepare --input docs.txt --output d --no-progress --overwrite 2>&1 >/dev/null)
[ -z "$err" ] || fail "a warning for a file of 3 documents: $err"
# binary files in a data directory are skipped with one warning line, not read as text
printf 'some\0binary\0bytes' >corpus/blob.bin
printf 'caf\xe9 in latin-1\n' >corpus/latin1.txt
out=$("$moet" data prepare --input corpus --output d --no-progress --overwrite 2>"$tmp/err")
err=$(cat "$tmp/err")
[[ "$err" == "moet: warning: skipping 2 files in 'corpus': not text"* ]] ||
  fail "binary files not skipped with a warning: $err"
[ "$(printf '%s\n' "$err" | grep -c .)" -eq 2 ] || fail "more than the expected warnings: $err"
[[ "$out" == *"2 files"* ]] || fail "the binary files were read: $out"
err=$("${text_train[@]}" --data corpus --doc-boundary blank-line 2>&1 >/dev/null)
[[ "$err" == "moet: warning: skipping 2 files in 'corpus'"* ]] || fail "train read binary files: $err"

echo "cli_forgiving: suggestions for $suggested commands, --overwrite, --threads, --seq, documents"
