#!/usr/bin/env bash
# Activation recomputation end to end (docs/training.md, "Memory"): `moet train` with
# --recompute-granularity selective (each module, Megatron's MoE set) and full (uniform and
# block) trains bit for bit what the run without trains — the same losses and gradient norms
# every step and checkpoints that `moet checkpoint diff` finds identical — in fp32, bf16 and
# MXFP8; likewise under mpirun with --ep 2 (also with the two-lane --a2a-overlap) and with
# --pp 2 --vpp 2 (recomputation per virtual stage). The header says what it saves; bad
# combinations get one line.
# Usage: recompute_cli.sh MOET CONFIG MPIEXEC [MPIEXEC-FLAGS...] (no -np: the test sets it)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
. "$(dirname "$0")/cli_util.sh"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
common=(train --model "$config" --data mock --steps 3 --seq 32 --micro-batch 4 --grad-accum 2
        --quiet --peak-tflops 1 --threads 1 --eval-batches 1)
variants=(
  "selective:--recompute-granularity selective"
  "core_attn+mla_up_proj+moe_act+layernorm+mlp+shared_experts:--recompute-granularity selective --recompute-modules core_attn mla_up_proj moe_act layernorm mlp shared_experts"
  "moe+layernorm:--recompute-granularity selective --recompute-modules moe layernorm"
  "full:--recompute-granularity full"
  "full-uniform-2:--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
  "full-block-1:--recompute-granularity full --recompute-method block --recompute-num-layers 1"
)
# same NAME REF-DIR CANDIDATE-DIR: equal metrics (losses, norms, eval loss) and checkpoints
same() {
  cmp -s <(losses "$2/metrics.jsonl") <(losses "$3/metrics.jsonl") || {
    diff <(losses "$2/metrics.jsonl") <(losses "$3/metrics.jsonl") | head -5
    fail "$1: the losses differ from the run without recomputation"
  }
  [ "$(losses "$2/metrics.jsonl" | wc -l)" -ge 15 ] || fail "$1: the metrics lack values"
  "$moet" checkpoint diff "$2" "$3" >"$dir/diff.txt" 2>&1 ||
    fail "$1: checkpoints differ: $(head -3 "$dir/diff.txt")"
  echo "$1: bit for bit"
}
run() {  # run OUT [flags...]: one process
  local out="$1"
  shift
  "$moet" "${common[@]}" --out "$out" "$@" >"$out.log" 2>&1 || fail "$out: $(tail -1 "$out.log")"
}
for p in fp32 bf16 mxfp8; do
  run "$dir/$p-none" --precision "$p" --bf16-layers 0
  for v in "${variants[@]}"; do
    name="${v%%:*}"
    read -ra flags <<<"${v#*:}"
    run "$dir/$p-$name" --precision "$p" --bf16-layers 0 "${flags[@]}"
    same "$p $name" "$dir/$p-none" "$dir/$p-$name"
  done
done

# The header: what each module saves (here without --quiet).
out=$("$moet" train --model "$config" --data mock --steps 1 --seq 32 --micro-batch 4 --threads 1 \
  --peak-tflops 1 --eval-batches 0 --recompute-granularity selective \
  --recompute-modules mla_up_proj moe_act layernorm 2>&1)
grep -q "^recompute: selective (mla_up_proj moe_act layernorm): [0-9.]* MB of activations made again before backward instead of kept (mla_up_proj [0-9.]*, moe_act [0-9.]*, layernorm [0-9.]*), sharing a [0-9.]* MB region: saves [0-9.]* MB$" <<<"$out" ||
  fail "header: no recompute line: $out"

# Expert parallelism, alone and with the two-lane overlap; pipeline with virtual stages.
mrun() {  # mrun NP OUT [flags...]
  local np="$1" out="$2"
  shift 2
  "${mpi[@]}" -np "$np" "$moet" "${common[@]}" --out "$out" "$@" >"$out.log" 2>&1 ||
    fail "$out: $(tail -3 "$out.log")"
}
# (pp: a chunk holding two decoder layers, so full's groups of two span them; pp-combined: combined
# 1F1B, 2 stages x 2 expert-parallel ranks.)
for layout in "2:ep:--ep 2" "2:a2a:--ep 2 --a2a-overlap" "2:pp:--pp 2 --vpp 2 --pp-layout E|tt|t|mL" \
  "4:pp-combined:--pp 2 --vpp 2 --pp-layout E|tt|t|mL --ep 2 --a2a-overlap --grad-accum 4"; do
  np="${layout%%:*}"
  rest="${layout#*:}"
  name="${rest%%:*}"
  read -ra lflags <<<"${rest#*:}"
  precisions=(fp32 mxfp8)
  [ "$np" -eq 2 ] || precisions=(mxfp8)
  for p in "${precisions[@]}"; do
    mrun "$np" "$dir/$name-$p-none" --precision "$p" --bf16-layers 0 "${lflags[@]}"
    for v in "${variants[@]:1:4}"; do
      vname="${v%%:*}"
      read -ra flags <<<"${v#*:}"
      mrun "$np" "$dir/$name-$p-$vname" --precision "$p" --bf16-layers 0 "${lflags[@]}" "${flags[@]}"
      same "$name $p $vname" "$dir/$name-$p-none" "$dir/$name-$p-$vname"
    done
  done
done

# Refusals: one line, nothing written.
refused "--recompute-modules needs --recompute-granularity selective" \
  "$moet" "${common[@]}" --recompute-modules core_attn
refused "--recompute-method and --recompute-num-layers need --recompute-granularity full" \
  "$moet" "${common[@]}" --recompute-granularity selective --recompute-num-layers 2
refused "--recompute-modules 'attention' is not one of core_attn, mla_up_proj" \
  "$moet" "${common[@]}" --recompute-granularity selective --recompute-modules attention
refused "--recompute-num-layers must be" \
  "$moet" "${common[@]}" --recompute-granularity full --recompute-num-layers 0
refused "--recompute-granularity 'some' is not one of none, selective, full" \
  "$moet" "${common[@]}" --recompute-granularity some
echo PASS
