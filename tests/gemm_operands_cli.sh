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
#  - --precision auto is the faster recipe by the same measurement (fp32 where fp32 GEMMs are
#    faster), a resumed auto run keeps its recipe, an explicit recipe that is not the faster says
#    what the other gives, and the header and the report show both GEMM peaks.
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

# --precision auto is the faster recipe by the same measurement (issue: auto picked bf16 from the
# CPU's flags where bf16 GEMMs ran at half fp32's speed), a resumed auto run keeps its recipe,
# and an explicit recipe that is not the faster says what the other gives.
auto=(train --model "$config" --data mock --seq 32 --micro-batch 2 --threads 1 --peak-tflops 1
      --eval-batches 0)
set_speeds 0.17 0.33
"$moet" "${auto[@]}" --steps 4 --save-every 2 --out "$dir/auto" --metrics "$dir/auto.jsonl" \
  >"$dir/auto.txt"
header "$dir/auto.txt" | grep -q "^precision: fp32 | auto: fp32 (bf16 GEMMs 0.17 TFLOP/s < fp32 0.33 at the model's shapes" ||
  fail "auto where fp32 is faster: $(header "$dir/auto.txt")"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["precision"] == "fp32"' \
  "$dir/auto/run.json" || fail "run.json does not record fp32"
set_speeds 0.9 0.3
"$moet" "${auto[@]}" --steps 1 >"$dir/auto-bf16.txt"
header "$dir/auto-bf16.txt" | grep -q "^precision: bf16 | auto: bf16 (bf16 GEMMs 0.9 TFLOP/s >= fp32 0.3" ||
  fail "auto where bf16 is faster: $(header "$dir/auto-bf16.txt")"
stopped_at "$dir/auto" 2 "$dir/auto-b"
head -2 "$dir/auto.jsonl" >"$dir/auto-b.jsonl"
"$moet" "${auto[@]}" --steps 4 --out "$dir/auto-b" --resume auto --metrics "$dir/auto-b.jsonl" \
  >"$dir/auto-b.txt"
header "$dir/auto-b.txt" | grep -q "^precision: fp32 | auto: fp32 (as the run recorded)" ||
  fail "a resumed auto run changed its recipe: $(header "$dir/auto-b.txt")"
diff <(losses "$dir/auto.jsonl") <(losses "$dir/auto-b.jsonl") >/dev/null ||
  fail "the resumed auto run differs from the straight one"
"$moet" "${auto[@]}" --steps 1 --precision fp32 >"$dir/fp32.txt"
grep -q "^precision: bf16 GEMMs run 3x fp32's here at the model's shapes: --precision bf16 (or auto) would use them$" \
  "$dir/fp32.txt" || fail "fp32 asked where bf16 is faster: $(header "$dir/fp32.txt")"
echo "ok: auto is the faster recipe by measurement, kept on resume; an explicit slower one says so"

# Both peaks in the header; MFU divides by the recipe's own (no --peak-tflops here)
"$moet" "${auto[@]/--peak-tflops/--log-every}" --steps 1 --precision fp32 --out "$dir/peaks" \
  >"$dir/peaks.txt"
grep -Eq "^GEMM peaks: fp32 [0-9.]+, bf16 [0-9.]+ TFLOP/s .*; MFU divides by the fp32 one \(the recipe's\)$" \
  "$dir/peaks.txt" || fail "no peaks line: $(grep -i peak "$dir/peaks.txt")"
"$moet" report "$dir/peaks" >/dev/null
grep -Eq "MFU divides by</th><td>[0-9.]+ TFLOP/s, the fp32 GEMM peak \(the recipe's\).*\(fp32 [0-9.]+, bf16 [0-9.]+\)" \
  "$dir/peaks/report.html" || fail "the report does not show the peaks"
echo "ok: the header and the report show both GEMM peaks and the one MFU divides by"
