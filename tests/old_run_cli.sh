#!/usr/bin/env bash
# A run directory written by moet before today's records (tests/fixtures/run-0522865: moet at
# commit 0522865 trained 2 steps of a small model, fp32, with --out and --tensorboard) still
# works: its checkpoint is inspected and verified, evaluated, resumed to step 4 (its options read
# from checkpoint.json and run.json as they were written then), exported, and reported.
# Usage: old_run_cli.sh MOET
set -euo pipefail
moet="$1"
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export MOET_CACHE_DIR="$dir/cache"
# shellcheck source=cli_util.sh
source "$here/cli_util.sh"
cp -r "$here/fixtures/run-0522865" "$dir/run"
"$moet" checkpoint inspect "$dir/run" >"$dir/inspect.txt" || fail "inspect: $(cat "$dir/inspect.txt")"
grep -q "step 2" "$dir/inspect.txt" || fail "inspect: $(head -3 "$dir/inspect.txt")"
"$moet" eval --checkpoint "$dir/run" --json >"$dir/eval.json"
python3 -c 'import json,sys; j = json.load(open(sys.argv[1])); assert j["precision"] == "fp32" and j["loss"] > 0, j' \
  "$dir/eval.json" || fail "eval: $(cat "$dir/eval.json")"
"$moet" train --model "$dir/run/model.json" --data mock --steps 4 --seq 16 --micro-batch 2 \
  --threads 1 --peak-tflops 1 --precision fp32 --quiet --eval-batches 1 --out "$dir/run" \
  --resume auto --override-opt-param-scheduler
[ -d "$dir/run/step-0000004" ] || fail "the old run did not resume to step 4"
[ "$(grep -c '"step"' "$dir/run/metrics.jsonl")" -eq 4 ] || fail "metrics: $(cat "$dir/run/metrics.jsonl")"
"$moet" export-hf "$dir/run" "$dir/hf" >/dev/null
"$moet" report "$dir/run" >/dev/null
[ -s "$dir/run/report.html" ] || fail "no report"
echo "ok: a run directory of moet 0522865 is inspected, evaluated, resumed, exported and reported"
