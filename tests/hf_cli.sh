#!/usr/bin/env bash
# moet export-hf / import-hf / eval through the command line: a trained checkpoint exported to a
# Hugging Face directory (fp32, and bf16 in shards) and imported back evaluates to the same
# logits bit for bit; eval's dump has the documented tensors; bad input gets one line and a
# non-zero exit. (tests/hf_interop.py checks the directories against transformers.)
# Usage: hf_cli.sh MOET SOURCE_DIR
set -euo pipefail
moet=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
export OMP_NUM_THREADS=2
eval_args=(--data mock --batches 2 --micro-batch 2 --seq 16)

# fp32: eval --checkpoint evaluates a run in its recipe, an imported checkpoint (which has none)
# in fp32; the default recipe (auto) is bf16 on a CPU with bf16 GEMMs
"$moet" train --model "$root/configs/tiny.json" --data mock --steps 2 --micro-batch 2 --seq 16 \
  --precision fp32 --out "$tmp/run" --quiet >/dev/null

"$moet" export-hf "$tmp/run" "$tmp/hf" --dtype fp32 >"$tmp/out"
grep -q "207 tensors" "$tmp/out" || fail "export-hf: $(cat "$tmp/out")"
[ -f "$tmp/hf/config.json" ] && [ -f "$tmp/hf/model.safetensors" ] || fail "export-hf files"
"$moet" export-hf "$tmp/run" "$tmp/hf-bf16" --max-shard-bytes 300000 >/dev/null
[ -f "$tmp/hf-bf16/model.safetensors.index.json" ] || fail "bf16 export is not sharded"
[ -f "$tmp/hf-bf16/model-00001-of-00004.safetensors" ] || fail "shard names: $(ls "$tmp/hf-bf16")"
grep -q '"torch_dtype": "bfloat16"' "$tmp/hf-bf16/config.json" || fail "bf16 torch_dtype"

"$moet" import-hf "$tmp/hf" "$tmp/imported" >"$tmp/out"
grep -q "205 tensors from 1 file" "$tmp/out" || fail "import-hf: $(cat "$tmp/out")"
"$moet" import-hf "$tmp/hf-bf16" "$tmp/imported-bf16" >/dev/null

"$moet" eval --checkpoint "$tmp/run" "${eval_args[@]}" --dump "$tmp/trained.safetensors" >"$tmp/a"
"$moet" eval --checkpoint "$tmp/imported" "${eval_args[@]}" --dump "$tmp/imported.safetensors" \
  >"$tmp/b"
cmp -s "$tmp/trained.safetensors" "$tmp/imported.safetensors" ||
  fail "checkpoint -> Hugging Face (fp32) -> checkpoint changed the logits"
grep -Eq "loss [0-9.]+, perplexity [0-9.]+, bits/byte [0-9.]+ \(1 held-out batches of 2 x 16 tokens" "$tmp/a" ||
  fail "eval line: $(cat "$tmp/a")"
[ "$(grep -o 'loss [0-9.]*' "$tmp/a")" = "$(grep -o 'loss [0-9.]*' "$tmp/b")" ] ||
  fail "eval losses differ: $(cat "$tmp/a" "$tmp/b")"
"$moet" eval --checkpoint "$tmp/imported-bf16" "${eval_args[@]}" --dump "$tmp/bf16.safetensors" \
  >/dev/null
/usr/bin/python3 - "$tmp" "$root/reference" <<'PY' || fail "eval dump check"
import sys
sys.path.insert(0, sys.argv[2])
from safetensors_io import load_file
d = sys.argv[1]
a = load_file(d + "/trained.safetensors")
b = load_file(d + "/bf16.safetensors")
assert sorted(a) == ["input_ids", "logits"], sorted(a)
assert tuple(a["input_ids"].shape) == (2, 16) and str(a["input_ids"].dtype) == "torch.int64"
assert tuple(a["logits"].shape) == (2, 16, 257) and str(a["logits"].dtype) == "torch.float32"
assert (a["input_ids"] == b["input_ids"]).all()
# bf16 weights: close, not equal. A token whose expert scores tie within bf16's rounding may
# route to another expert, so bound the positions, not the single worst logit.
d = (a["logits"] - b["logits"]).abs()
scale = float(a["logits"].abs().max())
per_position = d.amax(-1) / scale
assert 0 < float(d.max()), "bf16 export gave the fp32 logits exactly"
assert float((per_position < 0.05).float().mean()) >= 0.9, per_position
assert float(d.mean() / a["logits"].abs().mean()) < 0.02, float(d.mean())
PY

expect_error "no checkpoint at '$tmp/none'" "$moet" export-hf "$tmp/none" "$tmp/x"
expect_error "--dtype: fp16 not in" "$moet" export-hf "$tmp/run" "$tmp/x" --dtype fp16
expect_error "already exists" "$moet" import-hf "$tmp/hf" "$tmp/imported"
mkdir "$tmp/empty"
expect_error "cannot open '$tmp/empty/config.json'" "$moet" import-hf "$tmp/empty" "$tmp/y"
cp "$tmp/hf/config.json" "$tmp/empty/"
expect_error "has neither model.safetensors nor" "$moet" import-hf "$tmp/empty" "$tmp/y"
expect_error "exceeds max_position_embeddings (64)" "$moet" eval --checkpoint "$tmp/run" --seq 65
expect_error "commands: train, simulate, plan, bench, checkpoint, export-hf, import-hf, eval" \
  "$moet" export-huggingface
# Outputs already on disk are refused, not overwritten.
before=$(md5sum "$tmp/hf/model.safetensors")
expect_error "exists and is not empty" "$moet" export-hf "$tmp/run" "$tmp/hf"
[ "$(md5sum "$tmp/hf/model.safetensors")" = "$before" ] || fail "export-hf overwrote a file"
expect_error "--dump file '$tmp/trained.safetensors' already exists" "$moet" eval \
  --checkpoint "$tmp/run" "${eval_args[@]}" --dump "$tmp/trained.safetensors"
"$moet" export-hf "$tmp/run" "$tmp/hf" --dtype fp32 --overwrite >/dev/null
# moet train --init-from takes a Hugging Face directory directly, or an imported checkpoint:
# both start from the same weights, so the same first loss.
first_loss() {  # first_loss NAME [--init-from DIR]
  local name=$1
  shift
  "$moet" train --model "$root/configs/tiny.json" --data mock --steps 1 --micro-batch 2 \
    --seq 16 --quiet --metrics "$tmp/$name.jsonl" "$@" >/dev/null
  grep -o '"loss":[^,]*' "$tmp/$name.jsonl"
}
from_hf=$(first_loss from-hf --init-from "$tmp/hf")
[ "$from_hf" = "$(first_loss from-import --init-from "$tmp/imported")" ] ||
  fail "--init-from HF_DIR and --init-from an import of it start differently"
[ "$from_hf" != "$(first_loss fresh)" ] || fail "--init-from HF_DIR had no effect"
echo "hf_cli: ok"
