#!/usr/bin/env bash
# `moet train --tp N --sequence-parallel` end to end (docs/parallel.md, "Sequence parallelism"),
# on tests/configs/dense-tp.json (dense layers, an MTP module, a 260-word vocabulary):
#   - --deterministic: 2 ranks --tp 2, 4 ranks --tp 4, 4 ranks --tp 2 (dp 2, --zero1, --overlap
#     on), 4 ranks --tp 2 --pp 2 (and with --vpp 2, fp32) write checkpoints `moet checkpoint diff`
#     finds identical to one process, in fp32 and bf16, with --recompute-granularity selective and
#     (fp32) full in groups of 2 layers — the replicated weights used on token shards (norms, MLA's down-projections,
#     MTP's eh_proj) have their gradients summed by token piece over the parts;
#   - a checkpoint saved under --tp 2 --sequence-parallel resumed by one process continues as a
#     straight run;
#   - without --deterministic, with 4 sequences per micro-batch (the shards interleave), the run
#     matches one process to rounding in fp32 and the FP8/FP4 recipes;
#   - the header's kept activations fall below --tp 2's; the trace has the reduce-scatter;
#   - refusals in one line: no --tp, a --seq --tp does not divide, --deterministic
#     with a --seq not a multiple of the 8 token pieces.
# Usage: mpi_sequence_parallel_cli.sh MOET SOURCE_DIR MPIEXEC [MPIEXEC-FLAGS...] (no -np)
set -euo pipefail
moet="$1" src="$2"
shift 2
mpi=("$@")
config="$src/tests/configs/dense-tp.json"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
det=(train --model "$config" --data mock --steps 3 --seq 32 --grad-accum 2 --quiet
     --peak-tflops 1 --threads 1 --eval-batches 0 --deterministic --grad-clip 0.5)
for extra in "" "--precision bf16" "--recompute-granularity selective" \
  "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"; do
  # shellcheck disable=SC2086
  "$moet" "${det[@]}" $extra --micro-batch 4 --out "$dir/one"
  for layout in "2 4 --tp 2" "4 4 --tp 4" "4 2 --tp 2 --zero1 --overlap on" \
    "4 4 --tp 2 --pp 2 --pp-layout Et|ttmL" "4 4 --tp 2 --pp 2 --vpp 2 --pp-layout Et|t|t|mL"; do
    read -r np mb flags <<<"$layout"
    # full recomputation and --vpp: one layout each, to keep CI short
    [[ $extra == *full && $np == 4 ]] && continue
    [[ $flags == *vpp* && -n "$extra" ]] && continue
    rm -rf "$dir/sp"
    # shellcheck disable=SC2086
    "${mpi[@]}" -np "$np" "$moet" "${det[@]}" $extra --micro-batch "$mb" $flags \
      --sequence-parallel --out "$dir/sp"
    identical_checkpoints "$moet" "$dir/one/step-0000003" "$dir/sp/step-0000003" \
      "$np ranks $flags --sequence-parallel${extra:+ $extra} = one process --deterministic, bitwise"
  done
  rm -rf "$dir/one"
done

# saved under --tp 2 --sequence-parallel at step 2 of 4, the last checkpoint removed, resumed by
# one process
run=(train --model "$config" --data mock --seq 32 --micro-batch 2 --quiet --peak-tflops 1
     --threads 1 --eval-batches 0 --deterministic --steps 4)
"$moet" "${run[@]}" --metrics "$dir/straight.jsonl"
losses "$dir/straight.jsonl" >"$dir/a.txt"
"${mpi[@]}" -np 2 "$moet" "${run[@]}" --tp 2 --sequence-parallel --out "$dir/cut" --save-every 2 \
  --metrics "$dir/cut.jsonl"
rm -r "$dir/cut/step-0000004"
"$moet" "${run[@]}" --out "$dir/cut" --resume auto --metrics "$dir/cut.jsonl" --overwrite-metrics
losses "$dir/cut.jsonl" >"$dir/b.txt"
[ -s "$dir/a.txt" ] && diff "$dir/a.txt" "$dir/b.txt" >/dev/null ||
  fail "saved under --tp 2 --sequence-parallel, resumed by one process, differs"
echo "ok: a --tp 2 --sequence-parallel checkpoint resumed by one process continues as the straight run"

# plain sums, 4 sequences per micro-batch: a part's shard holds rows of every sequence
plain=(train --model "$config" --data mock --steps 3 --seq 32 --micro-batch 4 --quiet
       --peak-tflops 1 --threads 1 --eval-batches 0)
for p in fp32 mxfp8 nvfp4; do
  "$moet" "${plain[@]}" --precision "$p" --metrics "$dir/$p-1.jsonl"
  "${mpi[@]}" -np 2 "$moet" "${plain[@]}" --precision "$p" --tp 2 --sequence-parallel \
    --metrics "$dir/$p-2.jsonl"
  python3 - "$p" "$dir/$p-1.jsonl" "$dir/$p-2.jsonl" <<'PY' || fail "--sequence-parallel --precision $p strays"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[2])]
b = [json.loads(l)["loss"] for l in open(sys.argv[3])]
assert len(a) == len(b) == 3, (a, b)
# fp32: the first step's loss (before any update) to rounding, later steps to 1e-3 (AdamW
# magnifies the last bits of near-zero gradients); FP8/FP4: each part quantizes its own slices
bound = 1e-6 if sys.argv[1] == "fp32" else 2e-3
assert abs(a[0] - b[0]) <= bound * abs(a[0]), (a, b)
assert all(abs(x - y) <= max(bound, 1e-3) * abs(x) for x, y in zip(a, b)), (a, b)
PY
done
echo "ok: --tp 2 --sequence-parallel without --deterministic matches one process (fp32, mxfp8, nvfp4)"

# the header: kept activations below --tp 2's (the residual stream, its norms' statistics and the
# layer inputs are halved); the trace: the row-parallel outputs reduce-scattered
for sp in "" --sequence-parallel; do
  "${mpi[@]}" -np 2 "$moet" train --model "$config" --data mock --steps 1 --seq 32 --micro-batch 4 \
    --peak-tflops 1 --threads 1 --eval-batches 0 --tp 2 $sp --metrics "$dir/m$sp.jsonl" \
    --overwrite-metrics --trace "$dir/t$sp.json" >"$dir/head$sp.txt"
done
python3 - "$dir" <<'PY' || fail "--sequence-parallel reports"
import json, re, sys
d = sys.argv[1]
def kept(name):
    m = re.search(r"activations: ([0-9.]+) MB kept", open(f"{d}/{name}").read())
    assert m, name
    return float(m.group(1))
assert kept("head--sequence-parallel.txt") < kept("head.txt"), (kept("head--sequence-parallel.txt"), kept("head.txt"))
assert "; sequence parallel: the residual stream and norms hold 1/2 of each sequence\n" in open(d + "/head--sequence-parallel.txt").read()
assert "sequence parallel" not in open(d + "/head.txt").read()
m = json.loads(open(d + "/m--sequence-parallel.jsonl").readline())
assert m["tp_bytes"] > 0 and m["tp_comm_s"] > 0, m
events = json.load(open(d + "/t--sequence-parallel.rank0.json"))["traceEvents"]
spans = {e["name"] for e in events if e.get("cat") == "tp"}
assert {"tp sum", "tp gather", "tp reduce-scatter"} <= spans, spans
PY
echo "ok: --sequence-parallel keeps fewer activations than --tp 2 alone; tp reduce-scatter traced"

# refusals: one line, non-zero
one=(train --data mock --steps 1 --quiet --sequence-parallel)
mpi_refused 1 "add --tp 2" "${one[@]}" --model "$config" --seq 32
mpi_refused 2 "--seq 33 does not divide over --tp 2" "${one[@]}" --model "$config" --seq 33 --tp 2
mpi_refused 2 "--seq must be a multiple of 8" "${one[@]}" --model "$config" --seq 36 --tp 2 \
  --deterministic
echo "mpi_sequence_parallel_cli: ok"
