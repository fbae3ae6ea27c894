#!/usr/bin/env bash
# A prepared dataset carries its tokenizer, and no command meets a model with the wrong one
# (docs/data.md, "The dataset's tokenizer"; issue: the Megatron-data path lost the tokenizer):
#  - `moet data prepare --tokenizer tok.json` writes PREFIX.moet.json and PREFIX.tokenizer.json
#    (tok.json's bytes) beside PREFIX.bin/.idx;
#  - `moet train --data PREFIX --out RUN` without --tokenizer keeps that tokenizer in RUN; then
#    `moet eval --checkpoint RUN` gives the bits/byte of --tokenizer tok.json, `moet generate`
#    encodes with it, and `moet export-hf` writes its vocabulary and end-of-document id;
#  - data without a record (written by another tool) are trained with a one-line warning, and
#    then eval, generate and export-hf refuse the byte fallback for a 1,024-id model in one line
#    (export-hf writing nothing), while --tokenizer tok.json works;
#  - a --tokenizer other than the data's own, a blend of datasets tokenized differently, and a
#    run's tokenizer evaluated on data prepared with another are refused in one line.
# Usage: dataset_tokenizer_cli.sh MOET CONFIG (CONFIG: a 257-id config; the test widens it)
set -euo pipefail
moet="$1" config="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export MOET_CACHE_DIR="$dir/cache"
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"

corpus=/usr/share/games/fortunes
"$moet" tokenizer train --input "$corpus" --vocab-size 1024 --output "$dir/tok.json" >/dev/null
"$moet" data prepare --input "$corpus" --tokenizer "$dir/tok.json" --output "$dir/d" \
  --no-progress >/dev/null
[ -f "$dir/d.moet.json" ] || fail "prepare wrote no d.moet.json"
cmp -s "$dir/tok.json" "$dir/d.tokenizer.json" || fail "d.tokenizer.json is not tok.json"
echo "prepare: the tokenizer recorded beside the data"

sed 's/"vocab_size": 257/"vocab_size": 1024/' "$config" >"$dir/m.json"
train=(train --model "$dir/m.json" --seq 32 --micro-batch 2 --threads 1 --peak-tflops 1
       --eval-batches 1 --steps 2)
"$moet" "${train[@]}" --quiet --data "$dir/d" --out "$dir/r"
cmp -s "$dir/tok.json" "$dir/r/tokenizer.json" || fail "the run did not keep the data's tokenizer"
bpb() { "$moet" eval --checkpoint "$1" --batches 1 --threads 1 --json "${@:2}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["bits_per_byte"])'; }
a=$(bpb "$dir/r") b=$(bpb "$dir/r" --tokenizer "$dir/tok.json")
[ "$a" = "$b" ] || fail "eval: bits/byte $a without --tokenizer, $b with it"
"$moet" generate --checkpoint "$dir/r" --prompt "The cat" --max-new-tokens 2 --threads 1 2>&1 |
  grep -q "tokenizer: byte-level BPE" || fail "generate does not use the data's tokenizer"
"$moet" export-hf "$dir/r" "$dir/hf" >/dev/null
python3 - "$dir/hf" "$dir/d.moet.json" <<'PY' || fail "export-hf: not the data's tokenizer"
import json, sys
hf, rec = sys.argv[1], json.load(open(sys.argv[2]))
tok = json.load(open(hf + "/tokenizer.json"))
ids = len(tok["model"]["vocab"]) + len([t for t in tok.get("added_tokens", []) if t["id"] >= len(tok["model"]["vocab"])])
cfg = json.load(open(hf + "/config.json"))
assert ids == rec["tokenizer_vocab_size"], (ids, rec)
assert cfg["eos_token_id"] == rec["eod_id"], (cfg["eos_token_id"], rec)
PY
echo "train --data PREFIX: the run keeps the data's tokenizer; eval, generate, export-hf use it"

# Data another tool wrote: no record
cp "$dir/d.bin" "$dir/x.bin"
cp "$dir/d.idx" "$dir/x.idx"
"$moet" "${train[@]}" --data "$dir/x" --out "$dir/rx" >/dev/null 2>"$dir/err.txt"
grep -q "warning: $dir/x has no record of its tokenizer" "$dir/err.txt" ||
  fail "no warning for data without a record: $(cat "$dir/err.txt")"
[ ! -e "$dir/rx/tokenizer.json" ] || fail "a tokenizer kept for data without a record"
refused "is not this model's tokenizer" "$moet" generate --checkpoint "$dir/rx" --prompt "The cat"
refused "is not this model's tokenizer" "$moet" eval --checkpoint "$dir/rx" --batches 1
refused "is not this model's tokenizer" "$moet" export-hf "$dir/rx" "$dir/hfx"
[ ! -e "$dir/hfx" ] || fail "a refused export-hf wrote $dir/hfx"
"$moet" generate --checkpoint "$dir/rx" --tokenizer "$dir/tok.json" --prompt "The cat" \
  --max-new-tokens 2 --threads 1 >/dev/null
echo "data without a record: a warning, then the byte fallback refused everywhere"

"$moet" tokenizer train --input "$corpus" --vocab-size 1000 --output "$dir/tok2.json" >/dev/null
refused "is not the one $dir/d was prepared with" \
  "$moet" "${train[@]}" --data "$dir/d" --tokenizer "$dir/tok2.json" --out "$dir/r2"
[ ! -e "$dir/r2" ] || fail "a refused run created its --out"
"$moet" data prepare --input "$corpus" --output "$dir/bytes" --no-progress >/dev/null
refused "a blend's token ids must mean the same text" \
  "$moet" "${train[@]}" --data "0.5 $dir/d 0.5 $dir/bytes"
refused "is not the one $dir/bytes was prepared with" \
  "$moet" eval --checkpoint "$dir/r" --data "$dir/bytes" --batches 1
echo "refusals: another tokenizer, a mixed blend, a run's tokenizer on other data"
