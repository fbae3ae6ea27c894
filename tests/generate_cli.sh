#!/usr/bin/env bash
# moet generate through the command line (docs/generate.md): text and ids from a trained
# checkpoint, a seed reproduces a sampled continuation, the tokens/s line on stderr; bad input
# gets one line and a non-zero exit. (tests/generate_interop.py compares greedy decoding with
# transformers.)
# Usage: generate_cli.sh MOET SOURCE_DIR
set -euo pipefail
moet=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
export OMP_NUM_THREADS=2
"$moet" train --model "$root/configs/tiny.json" --data mock --steps 2 --micro-batch 2 --seq 16 \
  --out "$tmp/run" --quiet >/dev/null
gen=("$moet" generate --checkpoint "$tmp/run")

# greedy ids: as many as asked (or fewer, ending at the end-of-document id 256)
"${gen[@]}" --prompt-ids "72 101 108" --temperature 0 --max-new-tokens 10 --print-ids \
  >"$tmp/ids" 2>"$tmp/err"
n=$(wc -w <"$tmp/ids")
[ "$n" -eq 10 ] || [ "$(awk '{print $NF}' "$tmp/ids")" = 256 ] || fail "ids: $(cat "$tmp/ids")"
grep -Eq "prefill 3 tokens in [0-9.]+ s \([0-9.]+ tokens/s\), decode [0-9]+ tokens in [0-9.]+ s" \
  "$tmp/err" || fail "stderr line: $(cat "$tmp/err")"
# the same prompt as text (the byte tokenizer: "Hel" is 72 101 108) gives the same greedy ids
"${gen[@]}" --prompt "Hel" --temperature 0 --max-new-tokens 10 --print-ids >"$tmp/ids2" 2>/dev/null
cmp -s "$tmp/ids" "$tmp/ids2" || fail "--prompt vs --prompt-ids: $(cat "$tmp/ids" "$tmp/ids2")"
# a seed reproduces a sampled continuation; text mode writes something and exits 0
"${gen[@]}" --prompt "Hello" --seed 7 --top-k 50 --top-p 0.95 --max-new-tokens 20 --print-ids \
  >"$tmp/a" 2>/dev/null
"${gen[@]}" --prompt "Hello" --seed 7 --top-k 50 --top-p 0.95 --max-new-tokens 20 --print-ids \
  >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" || fail "seed 7 twice: $(cat "$tmp/a" "$tmp/b")"
"${gen[@]}" --prompt "Hello" --seed 8 --top-k 50 --top-p 0.95 --max-new-tokens 20 --print-ids \
  >"$tmp/c" 2>/dev/null
cmp -s "$tmp/a" "$tmp/c" && fail "seeds 7 and 8 gave the same tokens: $(cat "$tmp/a")"
"${gen[@]}" --prompt "Hello" --max-new-tokens 5 >"$tmp/text" 2>/dev/null || fail "text mode"

# the defaults follow transformers: greedy (said on the first stderr line), the prompt echoed before
# its continuation (--no-echo: the continuation alone), --top-k/--top-p alone sample at temperature 1
"${gen[@]}" --prompt-ids "72 101 108" --max-new-tokens 10 --print-ids >"$tmp/ids3" 2>"$tmp/err3"
cmp -s "$tmp/ids" "$tmp/ids3" || fail "default vs --temperature 0: $(cat "$tmp/ids" "$tmp/ids3")"
head -1 "$tmp/err3" | grep -q "greedy decoding" || fail "first line: $(head -1 "$tmp/err3")"
"${gen[@]}" --prompt "Hello" --max-new-tokens 8 >"$tmp/full" 2>/dev/null
"${gen[@]}" --prompt "Hello" --max-new-tokens 8 --no-echo >"$tmp/cont" 2>/dev/null
[ "$(cat "$tmp/full")" = "Hello$(cat "$tmp/cont")" ] ||
  fail "echo: '$(cat "$tmp/full")' is not 'Hello' + '$(cat "$tmp/cont")'"
"${gen[@]}" --prompt "Hello" --top-k 50 --max-new-tokens 4 --print-ids >/dev/null 2>"$tmp/err4"
head -1 "$tmp/err4" | grep -q "sampling at temperature 1, top-k 50" ||
  fail "--top-k alone does not sample: $(head -1 "$tmp/err4")"

# bad input: one line, non-zero exit
expect_error "no checkpoint at" "$moet" generate --checkpoint "$tmp/nowhere" --prompt "x"
expect_error "--top-p must be in (0, 1]" "${gen[@]}" --prompt "x" --top-p 0
expect_error "--top-p must be in (0, 1]" "${gen[@]}" --prompt "x" --top-p 1.5
expect_error "--temperature must be >= 0" "${gen[@]}" --prompt "x" --temperature -1
expect_error "exceed max_position_embeddings (64)" "${gen[@]}" --prompt "Hello" \
  --max-new-tokens 60
expect_error "not a token id in [0, 257)" "${gen[@]}" --prompt-ids "1 2 999"
expect_error "the prompt is empty" "${gen[@]}" --prompt ""
expect_error "excludes" "${gen[@]}" --prompt "a" --prompt-ids "1"
# the tokenizer: a tokenizer.json in the run directory is the one used (this one is no tokenizer,
# so loading it fails, naming it); --tokenizer byte overrides it
echo '{}' >"$tmp/run/tokenizer.json"
expect_error "$tmp/run/tokenizer.json" "${gen[@]}" --prompt "x" --max-new-tokens 2
"${gen[@]}" --tokenizer byte --prompt "x" --max-new-tokens 2 >/dev/null 2>&1 ||
  fail "--tokenizer byte beside a run's tokenizer.json"
echo "generate_cli: ok"
