#!/usr/bin/env bash
# Megatron datasets through the moet command line (docs/data.md):
#  - `moet data prepare` writes PREFIX.bin/.idx that `moet data inspect` reads back;
#  - `moet train --data PREFIX` (and a weighted blend of two prefixes, and JSONL read on the fly)
#    trains with finite losses, prints the data wait, writes data_wait_s per step, and caches its sample index;
#  - a run resumed from its step-3 checkpoint reads the same batches: losses bitwise equal to
#    the straight run's;
#  - refusals are one line and leave what is on disk: an existing PREFIX, bad blend weights, a
#    damaged index, a dataset too small for one sequence;
#  - a run resumed on other data says so in one line and run.json's segments record it;
#  - a run trained with a BPE tokenizer.json keeps it in its run directory, where moet eval and
#    moet generate find it, and a resumed run must name the same tokenizer.
# Usage: data_cli.sh MOET CONFIG
set -euo pipefail
moet="$1" config="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export MOET_CACHE_DIR="$dir/cache"
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"

# Some English text: a few thousand short documents.
for i in $(seq 1 400); do
  printf 'Document %d says the quick brown fox jumps over the lazy dog %d times.\n%%\n' "$i" "$i"
  printf 'Another paragraph, number %d, about data loaders and their caches.\n%%\n' "$i"
done >"$dir/a.txt"
for i in $(seq 1 300); do
  printf '{"text": "JSON line %d: tokens, samples and epochs."}\n' "$i"
done >"$dir/b.jsonl"
gzip -k "$dir/b.jsonl"

"$moet" data prepare --input "$dir/a.txt" --output "$dir/a" --workers 2 >"$dir/prep.txt"
grep -q "800 documents" "$dir/prep.txt" || fail "prepare: $(cat "$dir/prep.txt")"
"$moet" data prepare --input "$dir/b.jsonl.gz" --output "$dir/b" --no-progress >/dev/null
"$moet" data inspect "$dir/b" | grep -q "uint16 tokens, 300 sequences, 300 documents" ||
  fail "inspect: $("$moet" data inspect "$dir/b")"
"$moet" data inspect "$dir/b" --doc 2 --tokenizer byte | grep -q '^JSON line 3: tokens' ||
  fail "inspect --doc: $("$moet" data inspect "$dir/b" --doc 2 --tokenizer byte)"
before=$(md5sum "$dir/a.bin" "$dir/a.idx")
refused "a.bin' already exists" "$moet" data prepare --input "$dir/a.txt" --output "$dir/a"
[ "$before" = "$(md5sum "$dir/a.bin" "$dir/a.idx")" ] || fail "a refused prepare changed a.*"
echo "prepare: text and JSONL.gz written, read back, not overwritten"

common=(train --model "$config" --seq 32 --micro-batch 2 --threads 1 --peak-tflops 1
        --eval-batches 2)
"$moet" "${common[@]}" --data "$dir/a" --steps 3 --metrics "$dir/e2e.jsonl" >"$dir/e2e.txt"
grep -q "Megatron data $dir/a: .* sample index .* written $dir/a\..*\.sampleidx" "$dir/e2e.txt" ||
  fail "train: $(cat "$dir/e2e.txt")"
[ "$(grep -c '"data_wait_s"' "$dir/e2e.jsonl")" -eq 3 ] || fail "no data_wait_s per step"
if grep -o '"loss":[^,]*' "$dir/e2e.jsonl" | grep -qiv '"loss":[0-9.e+-]*$'; then
  fail "non-finite loss: $(cat "$dir/e2e.jsonl")"
fi
"$moet" "${common[@]}" --data "$dir/a" --steps 3 --quiet --metrics "$dir/e2e2.jsonl"
diff <(losses "$dir/e2e.jsonl") <(losses "$dir/e2e2.jsonl") >/dev/null ||
  fail "a second run (its sample index read from the cache) has other losses"
echo "train --data PREFIX: 3 steps, finite losses, data_wait_s, sample index cached and reused"

"$moet" "${common[@]}" --data "0.6 $dir/a 0.4 $dir/b" --steps 2 --quiet --metrics "$dir/blend.jsonl"
[ "$(grep -c '"loss"' "$dir/blend.jsonl")" -eq 2 ] || fail "blend did not train"
echo "train --data \"0.6 A 0.4 B\": trains"

# JSONL (gzip-compressed too) given to --data is read as data prepare reads it: one document per
# line's "text", malformed lines skipped and counted.
"$moet" "${common[@]}" --data "$dir/b.jsonl.gz" --steps 1 >"$dir/jsonl.txt"
grep -q "text data: $dir/b.jsonl.gz, [0-9]* tokens in 300 documents" "$dir/jsonl.txt" ||
  fail "--data FILE.jsonl.gz: $(cat "$dir/jsonl.txt")"
{ cat "$dir/b.jsonl"; echo '{"text": 7}'; echo 'not json'; } >"$dir/bad.jsonl"
"$moet" "${common[@]}" --data "$dir/bad.jsonl" --steps 1 >"$dir/jsonl.txt"
grep -q "in 300 documents .*, 2 malformed JSONL lines skipped" "$dir/jsonl.txt" ||
  fail "--data with malformed JSONL lines: $(cat "$dir/jsonl.txt")"
echo "train --data FILE.jsonl[.gz]: one document per line, malformed lines counted"

# Resume: the straight run saves at step 3; a copy of that checkpoint resumed gives its losses.
"$moet" "${common[@]}" --data "$dir/a" --quiet --eval-batches 0 --steps 6 --out "$dir/r-a" \
  --save-every 3 --metrics "$dir/r-a.jsonl"
stopped_at "$dir/r-a" 3 "$dir/r-b"
head -3 "$dir/r-a.jsonl" >"$dir/r-b.jsonl"
"$moet" "${common[@]}" --data "$dir/a" --quiet --eval-batches 0 --steps 6 --out "$dir/r-b" \
  --resume auto --metrics "$dir/r-b.jsonl"
diff <(losses "$dir/r-a.jsonl") <(losses "$dir/r-b.jsonl") >/dev/null ||
  fail "the resumed run's losses differ: $(diff <(losses "$dir/r-a.jsonl") <(losses "$dir/r-b.jsonl"))"
# Without prefetching the batches are the same.
"$moet" "${common[@]}" --data "$dir/a" --quiet --eval-batches 0 --steps 6 --prefetch 0 \
  --metrics "$dir/r-c.jsonl"
diff <(losses "$dir/r-a.jsonl") <(losses "$dir/r-c.jsonl") >/dev/null ||
  fail "--prefetch 0 gives other losses"
echo "resume from step 3 of 6 with --data PREFIX: losses bitwise equal; --prefetch 0 the same"

refused "weight 'x' of" "$moet" "${common[@]}" --data "x $dir/a 1 $dir/b" --steps 1
refused "the weights sum to zero" "$moet" "${common[@]}" --data "0 $dir/a 0 $dir/b" --steps 1
refused "3 fields" "$moet" "${common[@]}" --data "0.5 $dir/a 0.5" --steps 1
printf 'ab\n%%\ncd\n' >"$dir/tiny.txt"
"$moet" data prepare --input "$dir/tiny.txt" --output "$dir/tiny" >/dev/null
refused "holds 8 tokens in 2 documents, fewer than one sequence of 33 tokens" \
  "$moet" "${common[@]}" --data "$dir/tiny" --steps 1
cp "$dir/a.bin" "$dir/c.bin"
head -c 100 "$dir/a.idx" >"$dir/c.idx"
refused "c.idx: 800 sequences and 801 document boundaries need more than the file's 100 bytes" \
  "$moet" "${common[@]}" --data "$dir/c" --steps 1
echo "refusals: one line each"

# Resuming on other data is said in one line and recorded: run.json's segments name each start's
# data, the one that changed them with what they were (moet report marks the step).
stopped_at "$dir/r-a" 3 "$dir/r-c"
cp "$dir/r-a/run.json" "$dir/r-c/"
"$moet" "${common[@]}" --data "$dir/b" --eval-batches 0 --steps 6 --out "$dir/r-c" \
  --resume auto >"$dir/resume-b.txt"
grep -q "moet train: the data change at step 3: --data '$dir/a' --split 95,5 -> --data '$dir/b'" \
  "$dir/resume-b.txt" || fail "no data-change line at the resume: $(head -3 "$dir/resume-b.txt")"
python3 - "$dir/r-c/run.json" "$dir/a" "$dir/b" <<'PY' || fail "run.json does not record the change"
import json, sys
segs = json.load(open(sys.argv[1]))["segments"]
assert [s["start_step"] for s in segs] == [0, 3], segs
assert segs[0]["data"] == sys.argv[2] and "data_changed_from" not in segs[0], segs
assert segs[1]["data"] == sys.argv[3] and segs[1]["data_changed_from"]["data"] == sys.argv[2], segs
PY
echo "resume on other data: one line at the resume, recorded in run.json's segments"

# A BPE tokenizer: the run keeps it in --out, eval and generate find it there, and a resumed run
# keeps it (the data's own, recorded beside them; another one is refused).
sed 's/"vocab_size": 257/"vocab_size": 320/' "$config" >"$dir/bpe.json"
"$moet" tokenizer train --input "$dir/a.txt" --vocab-size 300 --output "$dir/tok.json" >/dev/null
"$moet" data prepare --input "$dir/a.txt" --tokenizer "$dir/tok.json" --output "$dir/t" \
  --no-progress >/dev/null
bpe=(train --model "$dir/bpe.json" --seq 32 --micro-batch 2 --threads 1 --peak-tflops 1
     --eval-batches 0 --data "$dir/t" --quiet --out "$dir/r-t")
"$moet" "${bpe[@]}" --tokenizer "$dir/tok.json" --steps 2
cmp -s "$dir/tok.json" "$dir/r-t/tokenizer.json" || fail "the run did not keep its tokenizer.json"
eval_of() { "$moet" eval --checkpoint "$dir/r-t" --data "$dir/t" --batches 1 --seq 32 \
  --micro-batch 2 --threads 1 "$@" | grep -o 'bits/byte [0-9.]*'; }
[ "$(eval_of)" = "$(eval_of --tokenizer "$dir/tok.json")" ] ||
  fail "eval does not use the run's tokenizer: $(eval_of) vs $(eval_of --tokenizer "$dir/tok.json")"
"$moet" generate --checkpoint "$dir/r-t" --prompt "Document 7 says" --max-new-tokens 3 \
  --temperature 0 --threads 1 2>&1 | grep -q "tokenizer: byte-level BPE (tokenizer '$dir/r-t/tokenizer.json')" ||
  fail "generate does not use the run's tokenizer"
"$moet" tokenizer train --input "$dir/a.txt" --vocab-size 290 --output "$dir/tok2.json" >/dev/null
refused "the tokenizer $dir/tok2.json is not the one $dir/t was prepared with ($dir/t.tokenizer.json)" \
  "$moet" "${bpe[@]}" --tokenizer "$dir/tok2.json" --steps 3 --resume auto
"$moet" "${bpe[@]}" --steps 3 --resume auto --override-opt-param-scheduler
cmp -s "$dir/tok.json" "$dir/r-t/tokenizer.json" || fail "a resumed run changed tokenizer.json"
echo "BPE tokenizer: kept in the run directory, found by eval and generate, checked on resume"
