#!/usr/bin/env bash
# moet simulate / plan / bench through the command line: the JSON array and its keys, the
# FLOPs per token printed, the top-5 plan, and one clear line (non-zero exit) for bad input.
# Usage: sim_cli.sh MOET SOURCE_DIR
set -euo pipefail
moet=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
dsv3=$root/configs/deepseek-v3-671b.json
record=(--model "$dsv3" --system gb300-nvl72 --tp 1 --pp 2 --vpp 8 --ep 32 --mbs 1 --gbs 4096
  --seq 4096 --precision mxfp8 --mtp 1 --pp-layout "Et*4|(t*4|)*14tmL")

"$moet" simulate "${record[@]}" --gpus 256,1024 --json >"$tmp/out.json" 2>"$tmp/err"
grep -q "260.0 GFLOP per token" "$tmp/err" || fail "no FLOPs per token line: $(cat "$tmp/err")"
/usr/bin/python3 - "$tmp/out.json" <<'PY' || fail "JSON check"
import json, sys
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list) and len(rows) == 2, rows
want = {"tflops_per_gpu", "tokens_per_s_per_gpu", "step_time_s", "mfu", "memory_gb_per_gpu",
        "memory_gb", "fits", "breakdown", "efficiency"}
for r in rows:
    assert set(r) == want, sorted(r)
    for k in ("compute", "a2a_exposed", "pp_bubble", "dp_exposed", "optimizer"):
        assert k in r["breakdown"], k
assert rows[0]["efficiency"] == 1.0
assert 0.9 < rows[1]["efficiency"] <= 1.0
assert abs(rows[0]["tflops_per_gpu"] - 1648) < 0.1 * 1648, rows[0]["tflops_per_gpu"]
PY

"$moet" simulate "${record[@]}" --gpus 256 >"$tmp/table"
grep -q "260.0 GFLOP per token" "$tmp/table" || fail "table lacks FLOPs per token"
grep -q "TP1 PP2 VPP8 EP32" "$tmp/table" || fail "table lacks the layout"
grep -q "^error band: -[0-9]*% to +[0-9]*% (the errors of [0-9]* published DeepSeek-V3 rows run with full-iteration CUDA graphs" "$tmp/table" ||
  fail "table lacks the error band"
grep -q "^assumes: full-iteration CUDA graphs, all-to-all overlap on (combined 1F1B), no recompute, force-balanced routing" "$tmp/table" ||
  fail "table lacks the assumptions"
# the FP4 recipes: the record's layout in nvfp4 beats mxfp8 (FP4 peak 3x on GB300, attention and
# memory-bound work unchanged: between 1.2x and 2x), with the stand-in assumptions printed; a
# system without an FP4 peak refuses in one line
mx=("${record[@]}")
nv=("${record[@]/mxfp8/nvfp4}")
"$moet" simulate "${nv[@]}" --gpus 256 --json >"$tmp/nv.json" 2>/dev/null
"$moet" simulate "${mx[@]}" --gpus 256 --json >"$tmp/mx.json" 2>/dev/null
/usr/bin/python3 - "$tmp/nv.json" "$tmp/mx.json" <<'PY' || fail "nvfp4 against mxfp8"
import json, sys
nv, mx = (json.load(open(p))[0]["tflops_per_gpu"] for p in sys.argv[1:3])
assert 1.2 * mx < nv < 2 * mx, (nv, mx)
PY
"$moet" simulate "${nv[@]}" --gpus 256 >"$tmp/nv_table"
grep -q "^assumes: .*nvfp4 GEMMs at MXFP8's efficiency of the FP4 peak" "$tmp/nv_table" ||
  fail "nvfp4 lacks its assumptions: $(tail -1 "$tmp/nv_table")"
refused "system 'h100-sxm' has no nvfp4 peak" "$moet" simulate --model "$dsv3" --system h100-sxm \
  --gpus 256 --tp 1 --pp 2 --ep 8 --mbs 1 --gbs 512 --seq 4096 --precision nvfp4
# a token budget in days and GPU-hours: 1e12 tokens at the predicted tokens/s on 256 GPUs
"$moet" simulate "${record[@]}" --gpus 256 --tokens 1e12 >"$tmp/tokens"
/usr/bin/python3 - "$tmp/tokens" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
row = next(l.split() for l in t.splitlines() if l.split()[:2] == ["256", "TP1"])
rate = float(row[-6])  # tokens/s per GPU
m = re.search(r"^1e\+12 tokens on 256 GPUs: ([\d.]+) days, (\d+) GPU-hours$", t, re.M)
assert m, t
days = 1e12 / (rate * 256) / 86400
assert abs(float(m.group(1)) - days) < 0.06, (m.group(1), days)
assert abs(float(m.group(2)) - days * 24 * 256) < 0.01 * days * 24 * 256, (m.group(2), days)
PY
# a layout that does not fit says what recompute would make it fit
"$moet" simulate --model "$dsv3" --system gb200-nvl72 --gpus 256 --tp 1 --pp 4 --vpp 4 --ep 64 \
  --mbs 1 --gbs 4096 --seq 4096 --precision mxfp8 --mtp 1 >"$tmp/nofit"
grep -q "^256 GPUs: needs [0-9.]* GB of 186; with --recompute selective .*(fits" "$tmp/nofit" ||
  fail "a layout that does not fit does not say what would fit: $(tail -3 "$tmp/nofit")"
# the validation table: every published row the catalog simulates, with its error
"$moet" published --model "$dsv3" >"$tmp/published"
# without --model: the repository's DeepSeek-V3 config, the same table
"$moet" published >"$tmp/published_default"
cmp -s "$tmp/published" "$tmp/published_default" || fail "moet published without --model differs"
[ "$(grep -c "^| D[0-9]* |" "$tmp/published")" -ge 20 ] || fail "moet published lists too few rows"
grep -q "^| D5 | DeepSeek-V3 | 26.06 | gb300-nvl72 | 256 | TP1 PP2 VPP8 EP32 MBS1 GBS4096 | .* | 1648 | " "$tmp/published" ||
  fail "moet published lacks the record row"
grep -q "^| K1 | Kimi-K2 | 26.06 | gb300-nvl72 | 256 | TP1 PP4 VPP4 EP64 MBS2 GBS4096 | mxfp8, 0 | none | off | mla_up_proj | 1099 | " "$tmp/published" ||
  fail "moet published lacks the Kimi-K2 rows"
# Kimi-K2 (configs/kimi-k2.json): 204.6 GFLOP per token as published (1099 TFLOP/s at 5372
# tokens/s), the band of its own rows where they ran (no CUDA graphs), none where none ran
kimi=(--model "$root/configs/kimi-k2.json" --system gb300-nvl72 --gpus 256 --pp 4 --vpp 4 --ep 64
  --mbs 2 --gbs 4096 --precision mxfp8 --recompute selective --recompute-modules mla_up_proj
  --pp-layout "Et*4|(t*4|)*14tL")
"$moet" simulate "${kimi[@]}" --cuda-graphs none --no-a2a-overlap --no-distributed-optimizer \
  >"$tmp/kimi" 2>&1
grep -q "204.5 GFLOP per token" "$tmp/kimi" || fail "Kimi-K2's FLOPs per token: $(cat "$tmp/kimi")"
grep -q "^error band: -[0-9]*% to -[0-9]*% (the errors of 4 published Kimi-K2 rows run with no CUDA graphs" "$tmp/kimi" ||
  fail "Kimi-K2 without CUDA graphs lacks its band: $(grep band "$tmp/kimi")"
"$moet" simulate "${kimi[@]}" >"$tmp/kimi" 2>&1
grep -q "^error band: none: no published Kimi-K2 row ran with full-iteration CUDA graphs" "$tmp/kimi" ||
  fail "Kimi-K2 with full graphs claims a band: $(grep band "$tmp/kimi")"

# The FP8-blockwise recipe by the trainer's name; "fp8", the simulator's former name, is read as
# it with one line on stderr and the same prediction.
h100=(--model "$dsv3" --system h100-sxm --gpus 1024 --tp 2 --pp 8 --vpp 4 --ep 64 --mbs 1
  --gbs 8192 --seq 4096 --mtp 1 --recompute selective --recompute-modules mla_up_proj moe_act layernorm
  --no-a2a-overlap)
"$moet" simulate "${h100[@]}" --precision fp8-blockwise >"$tmp/blockwise" 2>"$tmp/err"
[ ! -s "$tmp/err" ] || fail "fp8-blockwise wrote to stderr: $(cat "$tmp/err")"
grep -q "^h100-sxm, fp8-blockwise, " "$tmp/blockwise" || fail "table lacks fp8-blockwise"
"$moet" simulate "${h100[@]}" --precision fp8 >"$tmp/fp8" 2>"$tmp/err"
[ "$(cat "$tmp/err")" = "moet: warning: --precision fp8 is read as fp8-blockwise (the trainer's name)" ] ||
  fail "--precision fp8: $(cat "$tmp/err")"
cmp -s "$tmp/fp8" "$tmp/blockwise" || fail "--precision fp8 predicts otherwise than fp8-blockwise"

"$moet" plan --model "$dsv3" --system gb300-nvl72 --gpus 256 --gbs 4096 --seq 4096 \
  --precision mxfp8 --mtp 1 >"$tmp/plan"
grep -q "^#5 " "$tmp/plan" || fail "plan has no 5th layout"
grep -q "^why #1: .* beats " "$tmp/plan" || fail "plan does not say why #1 wins"
grep -q "^error band: " "$tmp/plan" || fail "plan gives no error band"
grep -q "equivalent to #1 within the model's error" "$tmp/plan" || fail "plan marks no equivalent layout"
# every layout shown says whether moet train runs it (the record's TP1 layouts all run)
[[ $(grep -c '^#[0-9].*\[moet train runs it\]$' "$tmp/plan") == 5 ]] ||
  fail "plan does not mark the layouts moet train runs"
grep -q "^moet train runs 5 of the 5 layouts shown$" "$tmp/plan" || fail "plan has no runs line"

# Bad input: non-zero exit, exactly one line on stderr saying what is wrong.
expect_error "EP 48 does not divide the 256 routed experts" "$moet" simulate "${record[@]}" --gpus 256 --ep 48
expect_error "unknown system 'gb999'" "$moet" simulate "${record[@]}" --gpus 256 --system gb999
expect_error "virtual stages do not divide the 64 pipeline slots" "$moet" simulate "${record[@]}" --gpus 256 --vpp 3 --pp-layout ""
expect_error "--gbs 4000 does not divide by MBS×DP" "$moet" simulate "${record[@]}" --gpus 256 --gbs 4000
expect_error "--gpus 255 does not divide by TP×PP" "$moet" simulate "${record[@]}" --gpus 255
expect_error "--precision 'fp4' is not one of" "$moet" simulate "${record[@]}" --gpus 256 --precision fp4
expect_error "has no mxfp8 peak" "$moet" simulate "${record[@]}" --gpus 256 --system h100-sxm
expect_error "cannot read system file" "$moet" simulate "${record[@]}" --gpus 256 --system "$tmp/none.json"
echo '{"name": "x"}' >"$tmp/bad.json"
expect_error "field 'peak_tflops'" "$moet" simulate "${record[@]}" --gpus 256 --system "$tmp/bad.json"
expect_error "--model" "$moet" simulate --system gb300-nvl72 --gpus 256 --gbs 1
expect_error "is not DeepSeek-V3's shape" "$moet" published --model "$root/configs/small.json"
expect_error "--tokens must be a finite number >= 0" "$moet" simulate "${record[@]}" --gpus 256 --tokens -1
# bench never replaces an earlier calibration unless told.
echo "keep" >"$tmp/local.json"
expect_error "exists" "$moet" bench --out "$tmp/local.json"
[ "$(cat "$tmp/local.json")" = keep ] || fail "bench overwrote an existing file"
# the emulated cluster's description needs both of its numbers
expect_error "give both (positive) or neither" "$moet" bench --out "$tmp/c.json" --ranks-per-node 2
expect_error "give both (positive) or neither" "$moet" bench --out "$tmp/c.json" --link-gbps 0.4
[ ! -e "$tmp/c.json" ] || fail "bench wrote a system file after refusing its flags"
expect_error "--cuda-graphs 'some' is not one of" "$moet" simulate "${record[@]}" --gpus 256 --cuda-graphs some
echo "sim_cli: ok"
