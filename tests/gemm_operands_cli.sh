#!/usr/bin/env bash
# Where a recipe's low-precision GEMMs run is chosen by measurement (docs/precision.md, "Which
# GEMMs multiply the operands"): bf16 GEMMs where they are faster at the model's shapes, fp32
# sgemm on the same exact values where fp32 is faster, as an Intel Xeon without AMX measures.
#  - The first run measures both and caches them (moet's cache directory, gemm-speeds.json); the
#    header says which GEMMs run and why.
#  - With the cache saying fp32 is faster (what such a CPU measures), an MXFP8 run multiplies in
#    fp32 and the header shows both speeds; a run saved so and resumed after the cache changed
#    keeps its recorded store and continues bit for bit.
#  - MOET_NO_BF16_GEMM=1 is named as the reason, never "no bf16 instructions" on a CPU with them.
# On a CPU without bf16 instructions nothing is measured: the header says so (checked instead).
# Usage: gemm_operands_cli.sh MOET CONFIG
set -euo pipefail
moet="$1" config="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export MOET_CACHE_DIR="$dir/cache"
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
run=(train --model "$config" --data mock --seq 32 --micro-batch 2 --threads 1 --peak-tflops 1
     --eval-batches 0 --precision mxfp8)
header() { grep '^precision:' "$1"; }

"$moet" "${run[@]}" --steps 1 >"$dir/first.txt"
if header "$dir/first.txt" | grep -q "no bf16 instructions"; then
  [ ! -e "$dir/cache/gemm-speeds.json" ] || fail "measured GEMM speeds without bf16 instructions"
  header "$dir/first.txt" | grep -q "values in fp32 GEMMs" || fail "$(header "$dir/first.txt")"
  echo "ok: no bf16 instructions here: fp32 GEMMs, nothing measured (the bf16 checks need a CPU with them)"
  exit 0
fi
[ -f "$dir/cache/gemm-speeds.json" ] || fail "the first run cached no GEMM speeds"
header "$dir/first.txt" | grep -Eq "\(bf16 GEMMs [0-9.e+-]+ TFLOP/s (>=|<) fp32 [0-9.e+-]+ at the model's shapes\)" ||
  fail "the header does not give the measured speeds: $(header "$dir/first.txt")"
"$moet" "${run[@]}" --steps 1 >"$dir/second.txt"
header "$dir/second.txt" | grep -q "measured earlier on this CPU" ||
  fail "the second run measured again: $(header "$dir/second.txt")"
echo "ok: measured once, cached: $(header "$dir/first.txt")"

set_speeds() {  # bf16 fp32: what the cache says every shape measured
  python3 - "$dir/cache/gemm-speeds.json" "$1" "$2" <<'PY'
import json, sys
path, bf16, fp32 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
c = json.load(open(path))
for k in c:
    c[k] = {"bf16_tflops": bf16, "fp32_tflops": fp32}
json.dump(c, open(path, "w"))
PY
}
set_speeds 0.17 0.33
"$moet" "${run[@]}" --steps 4 --out "$dir/a" --save-every 2 --metrics "$dir/a.jsonl" >"$dir/a.txt"
header "$dir/a.txt" | grep -q "mxfp8 as bf16 values in fp32 GEMMs: exact products, fp32 accumulation (bf16 GEMMs 0.17 TFLOP/s < fp32 0.33" ||
  fail "fp32 faster, yet: $(header "$dir/a.txt")"
grep -q '"gemm_operands": *"fp32"' "$dir/a/step-0000004/checkpoint.json" ||
  fail "the checkpoint does not record the fp32 store"
echo "ok: fp32 measured faster: MXFP8 multiplies in fp32, the header says why"
set_speeds 0.9 0.3
stopped_at "$dir/a" 2 "$dir/b"
head -2 "$dir/a.jsonl" >"$dir/b.jsonl"
"$moet" "${run[@]}" --steps 4 --out "$dir/b" --resume auto --metrics "$dir/b.jsonl" >"$dir/b.txt"
header "$dir/b.txt" | grep -q "values in fp32 GEMMs.*(as the run recorded)" ||
  fail "the resumed run did not keep its store: $(header "$dir/b.txt")"
diff <(losses "$dir/a.jsonl") <(losses "$dir/b.jsonl") >/dev/null ||
  fail "the resumed run differs: $(diff <(losses "$dir/a.jsonl") <(losses "$dir/b.jsonl") | head -4)"
echo "ok: a resumed run keeps its recorded store and continues bit for bit"
MOET_NO_BF16_GEMM=1 "$moet" "${run[@]}" --steps 1 >"$dir/no.txt"
header "$dir/no.txt" | grep -q "(MOET_NO_BF16_GEMM=1)" || fail "$(header "$dir/no.txt")"
! header "$dir/no.txt" | grep -q "no bf16 instructions" || fail "$(header "$dir/no.txt")"
echo "ok: MOET_NO_BF16_GEMM=1 is named, not 'no bf16 instructions'"
