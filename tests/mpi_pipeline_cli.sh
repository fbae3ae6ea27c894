#!/usr/bin/env bash
# Pipeline parallelism end to end (docs/pipeline.md): `moet train --pp` under mpirun trains the
# same model as the layout without a pipeline, bit for bit. Step by step, the gradient norm
# (which sees every parameter's gradient), the LM and MTP losses and the held-out loss equal
# the reference's exactly, and the total loss and each MoE layer's balance loss (gathered from
# the stages that hold the layers) within 1e-12 (the stages' balance-loss parts are added in
# another order):
#   - 1F1B on 2 and 4 stages, interleaved 1F1B (2 x 2 virtual stages, a stage holding only the
#     MTP layer and the loss), each against one process;
#   - 2 stages x 2 data-parallel ranks with --ep 2 and ZeRO-1, interleaved, against 2 ranks
#     with --ep 2 (no pipeline); the same with combined 1F1B (--a2a-overlap), whose passes are
#     checked to run combined, and with --delay-wgrad-compute (combined 1F1B in fp32 and in
#     bf16 with selective recomputation, DualPipeV's pairs);
#   - zero-bubble ZB-H1 (--pipeline-schedule zb1p, weight gradients deferred) on 2 and 4
#     stages, with --ep 2 --zero1, selective and full recomputation, fp32 and NVFP4;
#   - the V schedules zbv and DualPipeV on 2 and 4 ranks (2 chunks each), with --ep 2 --zero1
#     (DualPipeV with --a2a-overlap), selective and full recomputation, bf16 and MXFP8;
#   - a checkpoint saved by a pipeline run, resumed by one process, continues exactly as a run
#     never interrupted (the stages' pieces make up the whole model); one saved under zb1p
#     resumed under interleaved 1F1B, and one saved under dualpipev by one process, likewise;
#   - with --deterministic, a pipeline (with --vpp, --ep, --zero1, and under zb1p, zbv and
#     dualpipev, whose I and W of a sequence have other sequences' passes between them, with
#     selective and full recomputation) gives bitwise one process's losses (the total included)
#     and parameters;
# and bad pipeline flags get one line and a non-zero exit.
# Usage: mpi_pipeline_cli.sh MOET CONFIG MPIEXEC [MPIEXEC-FLAGS...] (no -np: the test sets it)
set -euo pipefail
moet="$1" config="$2"
shift 2
mpi=("$@")
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
common=(train --model "$config" --data mock --steps 3 --seq 32 --micro-batch 2 --grad-accum 4
        --quiet --peak-tflops 1 --threads 1 --eval-batches 2)
exact() { grep -o '"\(lm_loss\|mtp_loss\|grad_norm\|eval_loss\)":[^,}]*' "$1"; }
total() { grep -o '"loss":[^,}]*' "$1" | cut -d: -f2; }
same() {  # reference.jsonl candidate.jsonl what [values: 10 = 3 steps x 3 + the eval loss]
  exact "$1" >"$dir/a.txt"
  exact "$2" >"$dir/b.txt"
  [ "$(wc -l <"$dir/a.txt")" -ge "${4:-10}" ] || fail "$3: the metrics lack values"
  diff "$dir/a.txt" "$dir/b.txt" >/dev/null || {
    diff "$dir/a.txt" "$dir/b.txt" | head
    fail "$3 differs from the reference"
  }
  paste <(total "$1") <(total "$2") | awk -v what="$3" '{
    d = $1 - $2; if (d < 0) d = -d
    if (d > 1e-12 * ($1 < 0 ? -$1 : $1)) { print "FAIL: " what ": loss " $1 " vs " $2; exit 1 } }'
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$3: the balance loss per layer differs"
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(a) == len(b) and a, (len(a), len(b))
for x, y in zip(a, b):
    assert x["balance_loss_layers"] == y["balance_loss_layers"], (x, y)
    for u, v in zip(x["balance_loss_per_layer"], y["balance_loss_per_layer"]):
        assert abs(u - v) <= 1e-12 * abs(u), (x["step"], u, v)
PY
  echo "ok: $3"
}
flags_same() {  # schedule layout flags...: 2 pipeline ranks with the flags = one process with them
  local sch=$1 layout=$2
  shift 2
  "$moet" "${common[@]}" "$@" --metrics "$dir/f_ref.jsonl" --overwrite-metrics
  run 2 "$dir/f.jsonl" --pp 2 --pp-layout "$layout" --pipeline-schedule "$sch" "$@" \
    --overwrite-metrics
  same "$dir/f_ref.jsonl" "$dir/f.jsonl" "$sch $*"
}
run() {  # ranks out.jsonl args...
  local np=$1 out=$2
  shift 2
  "${mpi[@]}" -np "$np" "$moet" "${common[@]}" --metrics "$out" "$@"
}

"$moet" "${common[@]}" --metrics "$dir/one.jsonl"
run 2 "$dir/pp2.jsonl" --pp 2 --pp-layout "Et|ttmL"
same "$dir/one.jsonl" "$dir/pp2.jsonl" "1F1B, 2 stages"
run 4 "$dir/pp4.jsonl" --pp 4 --pp-layout "E|tt|t|mL"
same "$dir/one.jsonl" "$dir/pp4.jsonl" "1F1B, 4 stages (one with the embedding only)"
run 2 "$dir/vpp.jsonl" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL"
same "$dir/one.jsonl" "$dir/vpp.jsonl" "interleaved 1F1B, 2 stages x 2 chunks"
# zero-bubble ZB-H1 (--pipeline-schedule zb1p): each backward as its input gradient, the weight
# gradients later, where the stage would wait: the same bits, on 2 and 4 stages, with --ep and
# ZeRO-1, with selective and full recomputation, in fp32 and NVFP4 (TorchTitan's name accepted)
run 2 "$dir/zb.jsonl" --pp 2 --pp-layout "Et|ttmL" --pipeline-schedule zb1p
same "$dir/one.jsonl" "$dir/zb.jsonl" "zb1p, 2 stages"
run 4 "$dir/zb4.jsonl" --pp 4 --pp-layout "E|tt|t|mL" --pipeline-schedule InterleavedZeroBubble
same "$dir/one.jsonl" "$dir/zb4.jsonl" "zb1p, 4 stages"
flags_same zb1p "Et|ttmL" --precision fp32 --recompute-granularity selective \
  --recompute-modules mla_up_proj moe_act layernorm
flags_same zb1p "Et|ttmL" --precision nvfp4 --recompute-granularity full
"${mpi[@]}" -np 2 "$moet" train --model "$config" --data mock --steps 1 --seq 32 --micro-batch 2 \
  --grad-accum 4 --peak-tflops 1 --threads 1 --pp 2 --pp-layout "Et|ttmL" \
  --pipeline-schedule zb1p >"$dir/zb_header.txt"
grep -q "pipeline: zb1p, 2 stages" "$dir/zb_header.txt" || fail "the header does not name zb1p"
# Megatron's two rank grids (parallel folding), the pipeline outermost
grep -qF "grids: attention tp1 cp1 ep1 dp1 pp2 (tp-cp-ep-dp-pp); experts etp1 ep1 edp1 pp2 (etp-ep-edp-pp)" \
  "$dir/zb_header.txt" || fail "the header lacks the rank grids: $(grep grids "$dir/zb_header.txt")"
# the V schedules (zbv, DualPipeV): stages r and 2P-1-r on rank r, the embedding and the loss on
# rank 0, the V's turn a message to the rank itself; DualPipeV's F&B pairs run overlapped
for sch in zbv DualPipeV; do
  run 2 "$dir/v.jsonl" --pp 2 --pp-layout "Et|t|t|mL" --pipeline-schedule "$sch" --overwrite-metrics
  same "$dir/one.jsonl" "$dir/v.jsonl" "$sch, 2 ranks x 2 chunks"
done
"${mpi[@]}" -np 2 "$moet" train --model "$config" --data mock --steps 1 --seq 32 --micro-batch 2 \
  --grad-accum 4 --peak-tflops 1 --threads 1 --pp 2 --pp-layout "Et|t|t|mL" \
  --pipeline-schedule dualpipev >"$dir/v_header.txt"
grep -q "dualpipev: [1-9][0-9]* of rank 0's 8 backward passes run overlapped" "$dir/v_header.txt" ||
  fail "no DualPipeV pass ran overlapped: $(grep -i dualpipev "$dir/v_header.txt")"
# 4 ranks of a V over 8 stages (a 6-layer variant of the config), against one process
/usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['num_hidden_layers'] = 6
json.dump(c, open(sys.argv[2], 'w'))" "$config" "$dir/six.json"
six=(--model "$dir/six.json" --grad-accum 8)
"$moet" "${common[@]}" "${six[@]}" --metrics "$dir/one6.jsonl"
for sch in zbv dualpipev; do
  run 4 "$dir/v4.jsonl" "${six[@]}" --pp 4 --pp-layout "E|t|t|t|t|t|t|mL" \
    --pipeline-schedule "$sch" --overwrite-metrics
  same "$dir/one6.jsonl" "$dir/v4.jsonl" "$sch, 4 ranks x 2 chunks"
done
# with recomputation and low precision
flags_same dualpipev "Et|t|t|mL" --precision bf16 --recompute-granularity selective \
  --recompute-modules mla_up_proj moe_act layernorm
flags_same dualpipev "Et|t|t|mL" --precision mxfp8 --recompute-granularity full
# every step reports the pipeline's time, its bubble and the schedule's prediction
/usr/bin/python3 - "$dir/vpp.jsonl" <<'PY' || fail "pipeline metrics missing or not positive"
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    assert m["pp_run_s"] > 0 and m["pp_schedule_s"] > 0 and m["pp_bubble"] >= 0, m
    # the activations and gradients that travel between stages are counted, rank 0's in
    # comm_bytes: a step of 4 micro-batches of 2 x 32 tokens sends at least their hidden states
    assert m["pp_bytes"] >= 2 * 4 * 2 * 32 * 4 and m["comm_bytes"] > 0, m
    # pp_run_s is the slowest stage's, step_time_s rank 0's: ranks start a step apart by as
    # much as they left the last one apart (the first step: start-up), so allow a little skew
    assert m["pp_run_s"] <= 1.02 * m["step_time_s"] + 0.01, m
    # each rank's idle time; interleaved with --vpp has no closed-form bubble, and no W passes
    assert len(m["pp_idle_s"]) == 2 and all(0 <= x <= m["pp_run_s"] for x in m["pp_idle_s"]), m
    assert "pp_idle_formula_s" not in m and m["pp_weight_s"] == 0, m
    assert m["pp_forward_s"] > 0 and m["pp_backward_s"] > 0, m
PY
# zb1p (2 ranks) and dualpipev (4 ranks): each rank's idle time beside the formula, W timed apart
/usr/bin/python3 - "$dir/zb.jsonl" 2 "$dir/v4.jsonl" 4 <<'PY' || fail "pipeline idle metrics wrong"
import json, sys
for path, ranks in ((sys.argv[1], 2), (sys.argv[3], 4)):
    for line in open(path):
        m = json.loads(line)
        assert len(m["pp_idle_s"]) == ranks, (path, m)
        assert m["pp_idle_formula_s"] > 0 and 0 < m["pp_weight_s"] < m["pp_backward_s"], (path, m)
PY

run 2 "$dir/ep.jsonl" --ep 2
run 4 "$dir/pp_ep.jsonl" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --ep 2 --zero1
# (the mock data's one held-out batch is too few for 2 data-parallel ranks: no eval loss)
same "$dir/ep.jsonl" "$dir/pp_ep.jsonl" "2 stages x 2 data-parallel ranks, --ep 2 --zero1" 9
run 4 "$dir/zb_ep.jsonl" --pp 2 --pp-layout "Et|ttmL" --ep 2 --zero1 --pipeline-schedule zb1p
same "$dir/ep.jsonl" "$dir/zb_ep.jsonl" "zb1p, 2 stages x 2 data-parallel ranks, --ep 2 --zero1" 9
run 4 "$dir/v_ep.jsonl" --pp 2 --pp-layout "Et|t|t|mL" --ep 2 --zero1 --pipeline-schedule zbv \
  --overwrite-metrics
same "$dir/ep.jsonl" "$dir/v_ep.jsonl" "zbv, --ep 2 --zero1" 9
run 4 "$dir/v_ep.jsonl" --pp 2 --pp-layout "Et|t|t|mL" --ep 2 --zero1 --a2a-overlap \
  --pipeline-schedule dualpipev --overwrite-metrics
same "$dir/ep.jsonl" "$dir/v_ep.jsonl" "dualpipev, --ep 2 --zero1 --a2a-overlap" 9
# combined 1F1B: forwards and backwards of other micro-batches interleaved stage by stage
run 4 "$dir/combined.jsonl" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --ep 2 --a2a-overlap
same "$dir/ep.jsonl" "$dir/combined.jsonl" "combined 1F1B (--a2a-overlap), --ep 2" 9
# Megatron's --delay-wgrad-compute: each combined backward stage's weight gradients after its
# input gradients, under the exchanges in flight — the same bits (combined 1F1B with selective
# recomputation in bf16; dualpipev's pairs with --zero1)
run 4 "$dir/delay.jsonl" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --ep 2 --a2a-overlap \
  --delay-wgrad-compute --overwrite-metrics
same "$dir/ep.jsonl" "$dir/delay.jsonl" "combined 1F1B --delay-wgrad-compute, --ep 2" 9
delay_flags=(--precision bf16 --recompute-granularity selective --recompute-modules mla_up_proj
             moe_act layernorm)
run 2 "$dir/ep_bf16.jsonl" --ep 2 "${delay_flags[@]}" --overwrite-metrics
run 4 "$dir/delay.jsonl" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --ep 2 --a2a-overlap \
  --delay-wgrad-compute "${delay_flags[@]}" --overwrite-metrics
same "$dir/ep_bf16.jsonl" "$dir/delay.jsonl" "combined 1F1B --delay-wgrad-compute, bf16, selective" 9
run 4 "$dir/delay.jsonl" --pp 2 --pp-layout "Et|t|t|mL" --ep 2 --zero1 --pipeline-schedule \
  dualpipev --delay-wgrad-compute --overwrite-metrics
same "$dir/ep.jsonl" "$dir/delay.jsonl" "dualpipev --delay-wgrad-compute, --ep 2 --zero1" 9
"${mpi[@]}" -np 4 "$moet" train --model "$config" --data mock --steps 1 --seq 32 --micro-batch 2 \
  --grad-accum 4 --peak-tflops 1 --threads 1 --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --ep 2 \
  --a2a-overlap >"$dir/header.txt"
grep -q "combined 1F1B: [1-9][0-9]* of rank 0's 8 backward passes" "$dir/header.txt" ||
  fail "no pass ran combined: $(grep combined "$dir/header.txt")"
# combined 1F1B with as many micro-batches as stages: the first stage's warm-up holds every
# forward, and its last forward must not be combined with the first backward (they would wait on
# each other across the stages: this hung before)
"$moet" "${common[@]}" --micro-batch 4 --grad-accum 2 --metrics "$dir/one_m2.jsonl"
timeout 120 "${mpi[@]}" -np 2 "$moet" "${common[@]}" --micro-batch 4 --grad-accum 2 --pp 2 \
  --vpp 2 --pp-layout "Et|t|t|mL" --a2a-overlap --metrics "$dir/combined_m2.jsonl" ||
  fail "combined 1F1B with --grad-accum 2 = --pp did not finish"
same "$dir/one_m2.jsonl" "$dir/combined_m2.jsonl" "combined 1F1B, micro-batches = stages"

# a pipeline checkpoint resumed by one process
long=(--steps 4 --eval-batches 0)
"$moet" "${common[@]}" "${long[@]}" --metrics "$dir/straight.jsonl"
run 2 "$dir/cut.jsonl" "${long[@]}" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --out "$dir/run" \
  --save-every 2
rm -r "$dir/run/step-0000004"  # as if it had stopped after step 2
"$moet" checkpoint inspect "$dir/run" >/dev/null || fail "the pipeline checkpoint does not verify"
"$moet" "${common[@]}" "${long[@]}" --metrics "$dir/cut.jsonl" --out "$dir/run" --resume auto
exact "$dir/straight.jsonl" >"$dir/a.txt"
exact "$dir/cut.jsonl" >"$dir/b.txt"
diff "$dir/a.txt" "$dir/b.txt" >/dev/null || fail "resumed from a pipeline checkpoint, one process differs"
echo "ok: a --pp 2 --vpp 2 checkpoint resumed by one process"
# saved under zb1p, resumed under interleaved 1F1B
rm -rf "$dir/run"
run 2 "$dir/cut.jsonl" "${long[@]}" --pp 2 --pp-layout "Et|ttmL" --pipeline-schedule zb1p \
  --out "$dir/run" --save-every 2 --overwrite-metrics
rm -r "$dir/run/step-0000004"
run 2 "$dir/cut.jsonl" "${long[@]}" --pp 2 --vpp 2 --pp-layout "Et|t|t|mL" --out "$dir/run" \
  --resume auto --overwrite-metrics
exact "$dir/cut.jsonl" >"$dir/b.txt"
diff "$dir/a.txt" "$dir/b.txt" >/dev/null || fail "saved under zb1p, resumed interleaved, differs"
echo "ok: a zb1p checkpoint resumed under interleaved 1F1B"
# saved under dualpipev, resumed by one process
rm -rf "$dir/run"
run 2 "$dir/cut.jsonl" "${long[@]}" --pp 2 --pp-layout "Et|t|t|mL" --pipeline-schedule dualpipev \
  --out "$dir/run" --save-every 2 --overwrite-metrics
rm -r "$dir/run/step-0000004"
"$moet" "${common[@]}" "${long[@]}" --metrics "$dir/cut.jsonl" --out "$dir/run" --resume auto
exact "$dir/cut.jsonl" >"$dir/b.txt"
diff "$dir/a.txt" "$dir/b.txt" >/dev/null || fail "saved under dualpipev, resumed by one process, differs"
echo "ok: a dualpipev checkpoint resumed by one process"

# --deterministic: any pipeline layout gives one process's bits, the total loss and every
# parameter included (a sequence per pipeline micro-batch, each chunk's own gradient tree)
det=(train --model "$config" --data mock --steps 3 --seq 32 --grad-accum 2 --quiet
     --peak-tflops 1 --threads 1 --eval-batches 0 --deterministic)
"$moet" "${det[@]}" --micro-batch 4 --metrics "$dir/det1.jsonl" --out "$dir/det1"
for layout in "2 4 --pp 2 --vpp 2 --pp-layout Et|t|t|mL" \
  "4 2 --pp 2 --pp-layout Et|ttmL --ep 2" \
  "4 2 --pp 2 --vpp 2 --pp-layout Et|t|t|mL --ep 2 --zero1" \
  "2 4 --pp 2 --pp-layout Et|ttmL --pipeline-schedule zb1p" \
  "4 2 --pp 2 --pp-layout Et|ttmL --ep 2 --pipeline-schedule zb1p --recompute-granularity selective" \
  "2 4 --pp 2 --pp-layout Et|t|t|mL --pipeline-schedule zbv" \
  "2 4 --pp 2 --pp-layout Et|t|t|mL --pipeline-schedule dualpipev --recompute-granularity full" \
  "4 2 --pp 2 --pp-layout Et|t|t|mL --ep 2 --zero1 --pipeline-schedule dualpipev"; do
  read -ra a <<<"$layout"
  rm -rf "$dir/detp"
  "${mpi[@]}" -np "${a[0]}" "$moet" "${det[@]}" --micro-batch "${a[1]}" "${a[@]:2}" \
    --metrics "$dir/detp.jsonl" --overwrite-metrics --out "$dir/detp"
  all() { grep -o '"\(loss\|lm_loss\|mtp_loss\|balance_loss\|z_loss\|grad_norm\)":[^,}]*' "$1"; }
  diff <(all "$dir/det1.jsonl") <(all "$dir/detp.jsonl") >/dev/null ||
    fail "--deterministic ${a[*]:2} differs from one process"
  [ "$(all "$dir/detp.jsonl" | wc -l)" -eq 18 ] || fail "--deterministic: the metrics lack values"
  "$moet" checkpoint diff "$dir/det1" "$dir/detp" >/dev/null ||
    fail "--deterministic ${a[*]:2}: the parameters differ from one process"
  echo "ok: --deterministic ${a[*]:2} on ${a[0]} ranks = one process, bit for bit"
done

# bad flags: one line, non-zero exit
refuse() {  # expected-text ranks args...
  local want=$1 np=$2
  shift 2
  if "${mpi[@]}" -np "$np" "$moet" "${common[@]}" --metrics "$dir/bad.jsonl" --overwrite-metrics \
    "$@" >"$dir/bad.out" 2>&1; then
    fail "accepted $*"
  fi
  grep -qF -- "$want" "$dir/bad.out" || {
    cat "$dir/bad.out"
    fail "no \"$want\" for $*"
  }
}
refuse "--pp 3 does not divide the 2 ranks" 2 --pp 3
refuse "puts the loss on virtual stage 0" 2 --pp 2 --pp-layout "EtttmL|"
refuse 'do not split evenly over 2 virtual pipeline stages (--pp x --vpp): give --pp-layout, for example --pp-layout "Ett|tmL"' 2 --pp 2
# the layout the refusal suggests trains
run 2 "$dir/suggested.jsonl" --pp 2 --pp-layout "Ett|tmL"
same "$dir/one.jsonl" "$dir/suggested.jsonl" "the suggested --pp-layout"
# a bubble as long as the work trains, with a warning saying what --grad-accum brings it to 0.25
"${mpi[@]}" -np 2 "$moet" "${common[@]}" --grad-accum 1 --pp 2 --pp-layout "Ett|tmL" \
  --metrics "$dir/bubble.jsonl" >"$dir/bubble.out" 2>&1 || fail "--grad-accum 1 --pp 2: $(cat "$dir/bubble.out")"
grep -qF "moet: warning: the pipeline bubble (P-1)/(V*M) = (2-1)/(1*1) = 1.000: each stage waits at least as long as it computes; --grad-accum 4 brings it to 0.250" "$dir/bubble.out" ||
  fail "no bubble warning: $(cat "$dir/bubble.out")"
[ "$(grep -c "warning: the pipeline bubble" "$dir/bubble.out")" -eq 1 ] ||
  fail "the bubble warning is not one line from one rank: $(cat "$dir/bubble.out")"
refuse "--vpp and --pp-layout need --pp > 1" 2 --vpp 2
refuse "moet runs the MTP layers on the loss's stage" 2 --pp 2 --pp-layout "Etttm|L"
refuse "--pp must be positive, got 0" 2 --pp 0
refuse "--pipeline-schedule zb1p runs one model chunk per rank: drop --vpp 2" 2 --pp 2 --vpp 2 \
  --pp-layout "Et|t|t|mL" --pipeline-schedule zb1p
refuse "--pipeline-schedule zb1p has no combined 1F1B passes" 2 --pp 2 --pp-layout "Et|ttmL" \
  --pipeline-schedule zb1p --a2a-overlap
refuse "--pipeline-schedule dualpipev needs at least 2 x --pp = 4 micro-batches per step" 2 \
  --pp 2 --pp-layout "Et|t|t|mL" --pipeline-schedule dualpipev --grad-accum 3
refuse "--vpp must be 2 or left out, got 4" 2 --pp 2 --vpp 4 --pipeline-schedule zbv
refuse "--pipeline-schedule needs --pp > 1" 1 --pipeline-schedule zb1p
refuse "--delay-wgrad-compute delays the weight gradients of a combined pass: it needs --a2a-overlap under --pp, or --pipeline-schedule dualpipev" \
  2 --pp 2 --pp-layout "Et|ttmL" --delay-wgrad-compute
echo "ok: bad pipeline flags refused"
