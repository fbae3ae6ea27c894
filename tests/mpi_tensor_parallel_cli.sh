#!/usr/bin/env bash
# `moet train --tp N` end to end (docs/parallel.md, "Tensor parallelism"), on a dense model
# (tests/configs/dense-tp.json: tiny.json's shapes, dense layers only, a 260-word vocabulary —
# the byte tokenizer's 257 ids fit, and it divides into 4 pieces):
#   - --deterministic: 2 ranks --tp 2, 4 ranks --tp 2 (two data-parallel groups; and with --zero1
#     and the communication thread, --overlap on, beside the layers' TP collectives), 4 ranks
#     --tp 4, 4 ranks --tp 2 --pp 2 (with and without --vpp 2), and 8 ranks --tp 2 --pp 2 (dp 2,
#     --zero1, --overlap on; fp32 only) write checkpoints `moet checkpoint diff` finds identical
#     to one process with the same global batch (every parameter and AdamW moment, as whole
#     tensors), in fp32 and bf16, and with --recompute-granularity selective;
#   - moet eval, generate and export-hf read a --tp 2 checkpoint as the one-process one (the same
#     loss, text and files);
#   - a checkpoint saved under --tp 2 resumed by one process, and one saved by one process
#     resumed under --tp 2, continue exactly as a straight run (losses and gradient norms);
#   - --tp 2 --pp 2 reports the parts' share of the weights and each stage's activations in the
#     header, the TP collectives' bytes and seconds in the metrics and their spans in the trace;
#   - without --deterministic, --tp 2 trains the same model to within rounding, in fp32 and in
#     the FP8 and FP4 recipes;
#   - refusals in one line: a model with MoE layers, a world --tp does not divide.
# Usage: mpi_tensor_parallel_cli.sh MOET SOURCE_DIR MPIEXEC [MPIEXEC-FLAGS...] (no -np)
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
for extra in "" "--precision bf16" "--recompute-granularity selective"; do
  # shellcheck disable=SC2086
  "$moet" "${det[@]}" $extra --micro-batch 4 --out "$dir/one"
  for layout in "2 4 --tp 2" "4 2 --tp 2" "4 2 --tp 2 --zero1 --overlap on" "4 4 --tp 4" \
    "4 4 --tp 2 --pp 2 --pp-layout Et|ttmL" "4 4 --tp 2 --pp 2 --vpp 2 --pp-layout Et|t|t|mL" \
    "8 2 --tp 2 --pp 2 --pp-layout Et|ttmL --zero1 --overlap on"; do
    read -r np mb flags <<<"$layout"
    [[ $np == 8 && -n "$extra" ]] && continue  # 8 ranks on 2 cores: fp32 only, to keep CI short
    rm -rf "$dir/tp"
    # shellcheck disable=SC2086
    "${mpi[@]}" -np "$np" "$moet" "${det[@]}" $extra --micro-batch "$mb" $flags --out "$dir/tp"
    identical_checkpoints "$moet" "$dir/one/step-0000003" "$dir/tp/step-0000003" \
      "$np ranks $flags${extra:+ $extra} = one process --deterministic, bitwise"
  done
  rm -rf "$dir/one"
done

# eval, generate and export-hf from a --tp 2 checkpoint: checkpoints hold whole tensors, so they
# read it as one process's
rm -rf "$dir/tp"
"$moet" "${det[@]}" --micro-batch 4 --out "$dir/one"
"${mpi[@]}" -np 2 "$moet" "${det[@]}" --micro-batch 4 --tp 2 --out "$dir/tp"
for run in one tp; do
  "$moet" eval --checkpoint "$dir/$run" --data mock --batches 2 --threads 1 --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])' >"$dir/$run-eval.txt"
  "$moet" generate --checkpoint "$dir/$run" --prompt "The cat" --max-new-tokens 8 --threads 1 \
    2>/dev/null >"$dir/$run-gen.txt"
  "$moet" export-hf "$dir/$run" "$dir/$run-hf" >/dev/null
done
cmp -s "$dir/one-eval.txt" "$dir/tp-eval.txt" || fail "eval of a --tp 2 checkpoint differs"
[ -s "$dir/one-gen.txt" ] && cmp -s "$dir/one-gen.txt" "$dir/tp-gen.txt" ||
  fail "generate from a --tp 2 checkpoint differs"
for f in config.json model.safetensors; do
  cmp -s "$dir/one-hf/$f" "$dir/tp-hf/$f" || fail "export-hf of a --tp 2 checkpoint: $f differs"
done
echo "ok: eval ($(cat "$dir/tp-eval.txt")), generate and export-hf read a --tp 2 checkpoint as one process's"
rm -rf "$dir/one" "$dir/tp"

# resuming across layouts: saved at step 2 of 4, the last checkpoint removed, resumed
run=(train --model "$config" --data mock --seq 32 --micro-batch 2 --quiet --peak-tflops 1
     --threads 1 --eval-batches 0 --deterministic --steps 4)
"$moet" "${run[@]}" --metrics "$dir/straight.jsonl"
losses "$dir/straight.jsonl" >"$dir/a.txt"
"${mpi[@]}" -np 2 "$moet" "${run[@]}" --tp 2 --out "$dir/cut" --save-every 2 \
  --metrics "$dir/cut.jsonl"
rm -r "$dir/cut/step-0000004"
"$moet" "${run[@]}" --out "$dir/cut" --resume auto --metrics "$dir/cut.jsonl" --overwrite-metrics
losses "$dir/cut.jsonl" >"$dir/b.txt"
diff "$dir/a.txt" "$dir/b.txt" >/dev/null || fail "saved under --tp 2, resumed by one process, differs"
echo "ok: a --tp 2 checkpoint resumed by one process continues as the straight run"
rm -rf "$dir/cut"
"$moet" "${run[@]}" --out "$dir/cut" --save-every 2 --metrics "$dir/cut.jsonl" \
  --overwrite-metrics
rm -r "$dir/cut/step-0000004"
"${mpi[@]}" -np 2 "$moet" "${run[@]}" --tp 2 --out "$dir/cut" --resume auto \
  --metrics "$dir/cut.jsonl" --overwrite-metrics
losses "$dir/cut.jsonl" >"$dir/b.txt"
diff "$dir/a.txt" "$dir/b.txt" >/dev/null || fail "saved by one process, resumed under --tp 2, differs"
echo "ok: a one-process checkpoint resumed under --tp 2 continues as the straight run"

# what a --tp 2 --pp 2 run reports: in the header the share of each kind of weight a part holds
# and the stages' activations (each stage's first rank's: the later stage holds two layers, the
# MTP module and the loss), the TP collectives' bytes and seconds in the metrics (part of
# comm_bytes), their spans in the trace's "tp" category
"${mpi[@]}" -np 4 "$moet" train --model "$config" --data mock --steps 2 --seq 32 --micro-batch 2 \
  --grad-accum 2 --peak-tflops 1 --threads 1 --eval-batches 0 --tp 2 --pp 2 --pp-layout "Et|ttmL" \
  --metrics "$dir/tp.jsonl" --trace "$dir/t.json" >"$dir/tp.txt"
python3 - "$dir" <<'PY' || fail "--tp 2 --pp 2 reports"
import json, re, sys
d = sys.argv[1]
head = open(d + "/tp.txt").read()
assert "layout: 4 ranks = pp 2 x dp 1 x tp 2\n" in head, head
# stage 0's share of each kind of weight: half the MLPs' and the vocabulary's, more than half of
# attention's (its down-projections and norms are whole on every part), all of the rest
share = dict(re.findall(r"(attention|MLPs|vocabulary|norms and the rest) [0-9.]+M of [0-9.]+M \((\d+)%\)",
                        head))
assert share.keys() == {"attention", "MLPs", "vocabulary", "norms and the rest"}, head
assert share["MLPs"] == share["vocabulary"] == "50" and share["norms and the rest"] == "100", share
assert 50 < int(share["attention"]) < 75, share
stages = [float(x) for x in re.findall(r"stage \d (\d+\.\d) MB", head)]
assert len(stages) == 2 and stages[1] > stages[0], head
for line in open(d + "/tp.jsonl"):
    m = json.loads(line)
    assert m["tp_bytes"] > 0 and m["tp_comm_s"] > 0, m
    assert m["comm_bytes"] >= m["tp_bytes"] + m["grad_sync_bytes"], m
    assert len(m["pp_idle_s"]) == 2, m
def tp_spans(rank):
    events = json.load(open(f"{d}/t.rank{rank}.json"))["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "tp"}
# the first stage sums (embedding, layers); the last gathers too (the cross-entropy's maxima)
assert tp_spans(0) == {"tp sum"} and tp_spans(2) == {"tp sum", "tp gather"}, (tp_spans(0), tp_spans(2))
PY
echo "ok: --tp 2 --pp 2: stage activations, tp_bytes and tp_comm_s, the trace's tp spans"

# plain sums: the same training to rounding
plain=(train --model "$config" --data mock --steps 3 --seq 32 --micro-batch 2 --quiet
       --peak-tflops 1 --threads 1 --eval-batches 0)
"$moet" "${plain[@]}" --metrics "$dir/p1.jsonl"
"${mpi[@]}" -np 2 "$moet" "${plain[@]}" --tp 2 --metrics "$dir/p2.jsonl"
python3 - "$dir/p1.jsonl" "$dir/p2.jsonl" <<'PY' || fail "--tp 2 without --deterministic strays"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 3, (a, b)
# the first step's loss (before any update) to rounding; AdamW then magnifies the last bits of
# near-zero gradients, so later steps agree to 1e-3
assert abs(a[0] - b[0]) <= 1e-6 * abs(a[0]), (a, b)
assert all(abs(x - y) <= 1e-3 * abs(x) for x, y in zip(a, b)), (a, b)
PY
echo "ok: --tp 2 without --deterministic matches one process (step 1 to 1e-6, then 1e-3)"
# the FP8 and FP4 recipes (their middle layer; plain sums): each part quantizes its own slices —
# NVFP4's per-tensor scale comes from the part's amax, not the whole tensor's — so the runs agree
# to the recipes' rounding (measured on an Intel Xeon with AMX: nvfp4 within 5e-4 over 3 steps)
for p in mxfp8 fp8-blockwise nvfp4; do
  "$moet" "${plain[@]}" --precision "$p" --metrics "$dir/$p-1.jsonl" --overwrite-metrics
  "${mpi[@]}" -np 2 "$moet" "${plain[@]}" --precision "$p" --tp 2 --metrics "$dir/$p-2.jsonl" \
    --overwrite-metrics
  python3 - "$dir/$p-1.jsonl" "$dir/$p-2.jsonl" <<'PY' || fail "--tp 2 --precision $p strays"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 3 and all(abs(x - y) <= 2e-3 * abs(x) for x, y in zip(a, b)), (a, b)
PY
done
echo "ok: --tp 2 trains as one process in mxfp8, fp8-blockwise and nvfp4 (to 2e-3)"

# refusals: one line, non-zero, nothing written
mpi_refused 2 "the model has MoE layers" train --model "$src/configs/tiny.json" --data mock --steps 1 \
  --seq 32 --tp 2 --quiet
mpi_refused 3 "do not divide the 3 ranks" train --model "$config" --data mock --steps 1 --seq 32 \
  --tp 2 --quiet
echo "mpi_tensor_parallel_cli: ok"
