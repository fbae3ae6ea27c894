#!/usr/bin/env bash
# What `moet train` prints and logs (docs/metrics.md): the start-up notes and the header, and
# with --log-every 3 the interval means — at each step that prints, the JSONL's interval_* fields
# are the means of that interval's per-step JSONL values (loss, lm_loss, step time) and its rates
# (tokens/s, TFLOP/s, MFU weighted by step time), and the progress line shows them. Every step
# holds each MoE layer's balance loss, adding up to balance_loss (also with --deterministic and
# --grad-accum 2, and under mpirun over the ranks).
# With MPIEXEC [FLAGS...] after SOURCE_DIR (label mpi): 2 ranks --ep 2, rank 0's header states the
# layout, the global batch and the communication mode --overlap auto chose, the progress line
# labels global and per-rank rates, and grad_sync_bytes is in the metrics.
# Usage: metrics_cli.sh MOET SOURCE_DIR [MPIEXEC FLAGS...]
set -euo pipefail
moet=$1
root=$2
shift 2
mpi=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=cli_util.sh
source "$(dirname "$0")/cli_util.sh"
config="$root/configs/tiny.json"
common=(train --model "$config" --data mock --seq 32 --micro-batch 2 --threads 1 --eval-batches 0)
has() { grep -qF -- "$2" "$1" || fail "no '$2' in: $(cat "$1")"; }
balance_per_layer() {  # metrics.jsonl steps: each MoE layer's balance loss adds up to the sum
  python3 - "$1" "$2" "$config" <<'PY' || fail "balance_loss_per_layer of $1"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
cfg = json.load(open(sys.argv[3]))
L = cfg["num_hidden_layers"]
moe = [l for l in range(cfg["first_k_dense_replace"], L)] + [L + k for k in
                                                             range(cfg["num_nextn_predict_layers"])]
assert len(recs) == int(sys.argv[2]), len(recs)
for r in recs:
    assert r["balance_loss_layers"] == moe, (r["balance_loss_layers"], moe)
    per = r["balance_loss_per_layer"]
    assert len(per) == len(moe) and all(v > 0 for v in per), per
    assert abs(sum(per) - r["balance_loss"]) <= 1e-12 * r["balance_loss"], (per, r["balance_loss"])
print("balance_loss_per_layer: %d steps, layers %s, adding up to balance_loss" % (len(recs), moe))
PY
}

if [ ${#mpi[@]} -eq 0 ]; then
  export MOET_CACHE_DIR="$tmp/cache"
  "$moet" "${common[@]}" --steps 7 --log-every 3 --metrics "$tmp/m.jsonl" >"$tmp/out.txt"
  has "$tmp/out.txt" "moet train: building the model ..."
  # the first run on this CPU (a fresh cache) says it measures the peaks
  has "$tmp/out.txt" "moet train: measuring the GEMM peaks that MFU divides by (the first run on this CPU) ..."
  has "$tmp/out.txt" "global batch: micro-batch 2 x grad-accum 1 = 2 sequences of 32 tokens = 64 tokens per step"
  # one peak (no bf16 GEMMs) or both, and the one MFU divides by
  grep -Eq "^(MFU divides by the fp32 GEMM peak [0-9.]+ TFLOP/s \(1024\^3, best of [0-9]+ calls on 1 thread\)|GEMM peaks: fp32 [0-9.]+, bf16 [0-9.]+ TFLOP/s \(1024\^3, best of [0-9]+ and [0-9]+ calls on 1 thread\); MFU divides by the (fp32|bf16) one \(the recipe's\))$" \
    "$tmp/out.txt" || fail "no peak line: $(cat "$tmp/out.txt")"
  # the notes come before the header, the header before step 1
  [ "$(grep -n 'measuring the GEMM peak' "$tmp/out.txt" | cut -d: -f1)" -lt \
    "$(grep -En '^(MFU divides by|GEMM peaks:)' "$tmp/out.txt" | cut -d: -f1)" ] || fail "note after the header"
  [ "$(grep -c '^step ' "$tmp/out.txt")" -eq 3 ] || fail "expected 3 progress lines (steps 3, 6, 7)"
  python3 - "$tmp/m.jsonl" "$tmp/out.txt" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
lines = [l for l in open(sys.argv[2]) if l.startswith("step ")]
assert [r["step"] for r in recs] == list(range(1, 8)), recs
logged = {3: 3, 6: 3, 7: 1}  # --log-every 3 and the last step
def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))
for r in recs:
    if r["step"] not in logged:
        assert "interval_steps" not in r, r
        continue
    n = logged[r["step"]]
    assert r["interval_steps"] == n, r
    part = recs[r["step"] - n:r["step"]]
    mean = lambda k: sum(p[k] for p in part) / n
    secs = sum(p["step_time_s"] for p in part)
    rate = lambda k: sum(p[k] * p["step_time_s"] for p in part) / secs
    for key, want in (("interval_loss", mean("loss")), ("interval_lm_loss", mean("lm_loss")),
                      ("interval_mtp_loss", mean("mtp_loss")),
                      ("interval_step_time_s", mean("step_time_s")),
                      ("interval_tokens_per_s", rate("tokens_per_s")),
                      ("interval_tflops", rate("tflops")), ("interval_mfu", rate("mfu"))):
        assert close(r[key], want), (r["step"], key, r[key], want)
    line = lines[list(logged).index(r["step"])]
    want = "mean of %d step%s: loss %.4f" % (n, "s" if n > 1 else "", r["interval_loss"])
    assert want in line, (want, line)
    assert "step %d: loss %.4f" % (r["step"], r["loss"]) in line, line
print("interval means: steps 3, 6, 7 hold the means of their intervals' JSONL values")
PY
  balance_per_layer "$tmp/m.jsonl" 7
  "$moet" "${common[@]}" --steps 2 --grad-accum 2 --deterministic --peak-tflops 1 --quiet \
    --metrics "$tmp/det.jsonl"
  balance_per_layer "$tmp/det.jsonl" 2
  "$moet" "${common[@]}" --steps 2 --peak-tflops 1 --metrics "$tmp/one.jsonl" >"$tmp/one.txt"
  ! grep -q interval_ "$tmp/one.jsonl" || fail "--log-every 1 wrote interval fields"
  ! grep -q "mean of" "$tmp/one.txt" || fail "--log-every 1 printed means"
  has "$tmp/one.txt" "MFU divides by --peak-tflops 1.000 TFLOP/s"
  ! grep -q "measuring the GEMM peak" "$tmp/one.txt" || fail "measured a peak it was given"
  echo "ok: start-up notes, header, interval means"
  exit 0
fi

"${mpi[@]}" 2 "$moet" "${common[@]}" --steps 2 --ep 2 --metrics "$tmp/mpi.jsonl" >"$tmp/mpi.txt" 2>&1 ||
  fail "2 ranks: $(cat "$tmp/mpi.txt")"
[ "$(grep -c 'moet train: building the model' "$tmp/mpi.txt")" -eq 1 ] || fail "not rank 0 alone"
has "$tmp/mpi.txt" "layout: 2 ranks = pp 1 x dp 2; experts over ep 2 ranks, each expert's replicas over edp 1"
has "$tmp/mpi.txt" "global batch: micro-batch 2 x grad-accum 1 x dp 2 = 4 sequences of 32 tokens = 128 tokens per step"
has "$tmp/mpi.txt" "expert exchange: alltoall over 2 ranks"
# --overlap auto: a communication thread when the node's cores hold 2 x (1 compute thread + 1)
cores=$(getconf _NPROCESSORS_ONLN)
if [ "$cores" -ge 4 ]; then
  has "$tmp/mpi.txt" "communication: on a communication thread, overlapping compute (--overlap auto: $cores cores >= 2 ranks here x (1 compute thread + 1))"
else
  has "$tmp/mpi.txt" "communication: on the compute thread, not overlapped (--overlap auto: $cores cores < 2 ranks here x (1 compute thread + 1))"
fi
has "$tmp/mpi.txt" "MFU divides by the"
has "$tmp/mpi.txt" "per rank"
has "$tmp/mpi.txt" "tok/s (global)"
has "$tmp/mpi.txt" "TFLOP/s/rank"
has "$tmp/mpi.txt" "MB gradients)"
python3 - "$tmp/mpi.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2, recs
g = [r["grad_sync_bytes"] for r in recs]
# 4 bytes x tiny.json's 145,504 dense trainable floats (mpi_grad_bytes counts them): at 2 ranks
# the all-reduce sends each rank's whole gradient once; the experts (ep 2 = edp 1) stay home
assert g == [4 * 145504] * 2, g
for r in recs:
    assert r["comm_bytes"] > r["grad_sync_bytes"], r  # plus the experts' dispatch and combine
print("grad_sync_bytes %d per step, comm_bytes %d" % (g[0], recs[0]["comm_bytes"]))
PY
balance_per_layer "$tmp/mpi.jsonl" 2
"${mpi[@]}" 2 "$moet" "${common[@]}" --steps 1 --ep 2 --overlap on --peak-tflops 1 >"$tmp/on.txt" 2>&1 ||
  fail "--overlap on: $(cat "$tmp/on.txt")"
has "$tmp/on.txt" "communication: on a communication thread, overlapping compute (--overlap on)"
echo "ok: 2 ranks: layout, global batch, communication mode, labelled rates, gradient bytes"
