#!/usr/bin/env python3
"""Reads back the per-rank trace files of one `moet train --trace` run and checks that they
hold what docs/trace.md promises: the lanes, the span categories where they belong, evaluation
marked, spans nested, and the bytes_in_flight counter back at 0 at the end of every step.

Usage: trace_check.py --steps N --evals N --comm none|inline|thread [--dp] [--zero1] [--pp]
                      [--allgather] FILE... (one per rank)
Exits non-zero with one "FAIL: ..." line per broken promise.
"""
import argparse
import json
import re
import sys

EPS = 0.002  # us: ts and dur are rounded to the ns independently

failures = []


def fail(msg):
    failures.append(msg)


def inside(a, b):
    """Span a lies within span b in time."""
    return a["ts"] >= b["ts"] - EPS and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + EPS


def load(path):
    with open(path) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in ev if e["ph"] == "X"]
    for s in spans:
        s["lane"] = lanes.get(s["tid"], "?")
        s["cat"] = s.get("cat")
    counters = sorted((e for e in ev if e["ph"] == "C"), key=lambda e: e["ts"])
    return doc, lanes, spans, counters


def check_nesting(rank, spans):
    by_lane = {}
    for s in spans:
        by_lane.setdefault(s["lane"], []).append(s)
    for lane, ss in by_lane.items():
        ss.sort(key=lambda s: (s["ts"], -s["dur"]))
        stack = []
        for s in ss:
            while stack and s["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS:
                stack.pop()
            if stack and not inside(s, stack[-1]):
                fail(f"rank {rank}: '{s['name']}' overlaps '{stack[-1]['name']}' on lane {lane} "
                     "without nesting")
                return
            stack.append(s)


PASS = re.compile(r"^([FBIW]) (\d+)\.(\d+)( & ([FBIW]) (\d+)\.(\d+))?$")


def check_passes(rank, kind, spans, steps, evals):
    """--pp: every step's layer work lies in pass spans; each pass is named as the schedule's."""
    passes = [s for s in spans if s["cat"] == "pass"]
    if not passes:
        fail(f"rank {rank}: no pass spans under --pp")
        return
    ops = set()
    for p in passes:
        m = PASS.match(p["name"])
        if not m or p["lane"] != "compute":
            fail(f"rank {rank}: pass span '{p['name']}' on lane {p['lane']}")
            return
        ops.add(m.group(1) + ("&" + m.group(5) if m.group(4) else ""))
        if not any(inside(p, s) for s in steps):
            fail(f"rank {rank}: pass '{p['name']}' outside every step")
            return
    for s in spans:  # the layers' work of a training step runs inside a pass
        if s["cat"] != "layer" or any(inside(s, e) for e in evals):
            continue
        if any(inside(s, st) for st in steps) and not any(inside(s, p) for p in passes):
            fail(f"rank {rank}: '{s['name']}' at {s['ts']} us lies in no pass span")
            return
    want = {"fb": {"F", "B"}, "split": {"F", "I", "W"}, "pairs": {"F", "F&B", "I", "W"}}[kind]
    if not want <= ops:
        fail(f"rank {rank}: pass kinds {sorted(ops)}, expected at least {sorted(want)}")
    if kind == "fb" and ops & {"I", "W"}:
        fail(f"rank {rank}: I or W passes without a zero-bubble schedule")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--evals", type=int, required=True)
    ap.add_argument("--comm", choices=["none", "inline", "thread"], required=True)
    ap.add_argument("--dp", action="store_true", help="data parallelism: gradient reductions")
    ap.add_argument("--zero1", action="store_true")
    ap.add_argument("--pp", action="store_true", help="pipeline stages: point-to-point messages")
    ap.add_argument("--passes", choices=["fb", "split", "pairs"],
                    help="--pp: the pass spans hold F and B (no I, W); F, I and W (a zero-bubble "
                         "schedule); F, I, W and overlapped F&B pairs (dualpipev)")
    ap.add_argument("--allgather", action="store_true", help="--dispatcher allgather")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()

    cats_seen = set()
    positive = {}  # category -> lanes where a span of it lasted > 0 on some rank
    names_seen = set()
    for rank, path in enumerate(a.files):
        doc, lanes, spans, counters = load(path)
        other = doc["otherData"]
        if other["dropped_events"] != 0:
            fail(f"rank {rank}: {other['dropped_events']} events dropped")
        lane_names = list(lanes.values())
        if lane_names[:2] != ["steps", "compute"]:
            fail(f"rank {rank}: lanes {lane_names}, expected steps, compute first")
        if a.comm == "thread" and "comm" not in lane_names:
            fail(f"rank {rank}: no comm lane with a communication thread")
        if a.comm != "thread" and "comm" in lane_names:
            fail(f"rank {rank}: a comm lane without a communication thread")
        for s in spans:
            if s["cat"] is None and s["lane"] != "comm":
                fail(f"rank {rank}: span '{s['name']}' on lane {s['lane']} has no category")
                break
        cats = {s["cat"] for s in spans}
        cats_seen |= cats
        names_seen |= {(s["cat"], s["name"]) for s in spans}
        for s in spans:
            if s["dur"] > 0:
                positive.setdefault(s["cat"], set()).add(s["lane"])

        steps = [s for s in spans if s["cat"] == "step"]
        evals = [s for s in spans if s["cat"] == "eval"]
        if len(steps) != a.steps or any(s["lane"] != "steps" for s in steps):
            fail(f"rank {rank}: {len(steps)} step spans on the steps lane, expected {a.steps}")
        if len(evals) != a.evals or any(s["lane"] != "steps" for s in evals):
            fail(f"rank {rank}: {len(evals)} eval spans on the steps lane, expected {a.evals}")
        opt = [s for s in spans if s["cat"] == "optimizer"]
        if len(opt) != a.steps or any(s["lane"] != "compute" for s in opt):
            fail(f"rank {rank}: {len(opt)} optimizer spans on the compute lane, expected one per "
                 f"step ({a.steps})")
        for s in steps:
            if sum(1 for o in opt if inside(o, s)) != 1:
                fail(f"rank {rank}: a step span does not hold exactly one optimizer span")
                break
        # each rank runs decoder layers; a pipeline stage may hold only dense ones
        for c in ["layer", "attention"] + ([] if a.pp else ["router", "experts"]):
            if c not in cats:
                fail(f"rank {rank}: no '{c}' spans")
        # every category span belongs to a step or an evaluation, but the metrics' gather after
        # a step (and the wait for it, with a communication thread)
        for s in spans:
            if s["cat"] in (None, "step", "eval", "wait", "metrics"):
                continue
            if not any(inside(s, m) for m in steps + evals):
                fail(f"rank {rank}: '{s['name']}' ({s['cat']}, {s['lane']}) at {s['ts']} us lies "
                     "in no step or eval span")
                break
        check_nesting(rank, spans)
        # evaluation: forwards only
        in_eval = [s for s in spans if any(inside(s, e) for e in evals) and s["lane"] != "steps"]
        if a.evals:
            if not any(s["cat"] == "layer" and s["name"].endswith(" forward") for s in in_eval):
                fail(f"rank {rank}: no layer forward inside the eval spans")
            bad = [s["name"] for s in in_eval
                   if "backward" in s["name"] or "bwd" in s["name"] or s["cat"] in ("optimizer", "grad_sync")]
            if bad:
                fail(f"rank {rank}: training work inside an eval span: {bad[:3]}")
            if a.comm != "none" and not a.pp:
                ev_cats = {s["cat"] for s in in_eval}
                if not {"dispatch", "combine"} <= ev_cats:
                    fail(f"rank {rank}: the evaluation's exchanges are missing ({sorted(ev_cats - {None})})")
        # communication lanes
        comm_lane = {"inline": "compute", "thread": "comm"}.get(a.comm)
        for s in spans:
            if s["cat"] in ("dispatch", "combine") and s["lane"] != comm_lane:
                fail(f"rank {rank}: {s['cat']} span '{s['name']}' on lane {s['lane']}, expected "
                     f"{comm_lane}")
                break
        if a.comm == "thread" and "wait" not in cats:
            fail(f"rank {rank}: no wait spans with a communication thread")
        if a.comm == "inline" and "wait" in cats:
            fail(f"rank {rank}: wait spans without a communication thread")
        if a.dp and "grad_sync" not in cats:
            fail(f"rank {rank}: no grad_sync spans under data parallelism")
        if a.pp and "pipeline" not in cats:
            fail(f"rank {rank}: no pipeline spans under --pp")
        if a.pp:
            check_passes(rank, a.passes or "fb", spans, steps, evals)
        # bytes in flight
        bif = [c for c in counters if c["name"] == "bytes_in_flight"]
        values = [c["args"]["value"] for c in bif]
        if a.comm == "none" and not a.pp:
            if values:
                fail(f"rank {rank}: bytes_in_flight samples without communication")
        else:
            if not values or max(values) <= 0:
                fail(f"rank {rank}: no positive bytes_in_flight sample")
            if values and min(values) < 0:
                fail(f"rank {rank}: bytes_in_flight below 0 ({min(values)})")
            if values and values[-1] != 0:
                fail(f"rank {rank}: bytes_in_flight ends at {values[-1]}, not 0")
            for s in steps + evals:
                end = s["ts"] + s["dur"]
                before = [c["args"]["value"] for c in bif if c["ts"] <= end + EPS]
                during = [c for c in bif if s["ts"] - EPS <= c["ts"] <= end + EPS]
                if s["cat"] == "step" and not during:
                    fail(f"rank {rank}: no bytes_in_flight sample during the step at {s['ts']} us")
                    break
                if before and before[-1] != 0:
                    fail(f"rank {rank}: bytes_in_flight is {before[-1]} at the end of the "
                         f"{s['cat']} at {s['ts']} us")
                    break

    # across ranks: communication with positive duration on the lane the mode runs it on
    comm_lane = {"inline": "compute", "thread": "comm"}.get(a.comm)
    if a.comm == "none":
        # (a pipeline stage's data-parallel group of one still runs its reductions)
        for c in ["dispatch", "combine", "grad_sync", "pipeline", "wait"]:
            if c in cats_seen and not (c in ("pipeline", "grad_sync") and a.pp):
                fail(f"'{c}' spans in a run without communication")
    else:
        for c in ["dispatch", "combine"]:
            if comm_lane not in positive.get(c, set()):
                fail(f"no '{c}' span of positive duration on the {comm_lane} lane of any rank")
        want = {("dispatch", "input gradients to sources"), ("combine", "expert outputs to sources"),
                ("combine", "output gradients to experts")}
        if a.allgather:
            want |= {("dispatch", "expert all-gather")}
        else:
            want |= {("dispatch", "expert token counts"), ("dispatch", "expert all-to-all")}
        if not want <= names_seen:
            fail(f"exchanges missing: {sorted(want - names_seen)}")
    if a.dp:
        lane = "comm" if a.comm == "thread" else "compute"
        if lane not in positive.get("grad_sync", set()):
            fail(f"no grad_sync span of positive duration on the {lane} lane")
        what = "gradient reduce-scatter" if a.zero1 else "gradient allreduce"
        if ("grad_sync", what) not in names_seen:
            fail(f"no '{what}' span")
        if a.zero1 and ("grad_sync", "parameter all-gather") not in names_seen:
            fail("no 'parameter all-gather' span with --zero1")
    if a.pp:
        if "compute" not in positive.get("pipeline", set()):
            fail("no pipeline span of positive duration")
        for n in ["wait for activations", "wait for gradients"]:
            if ("pipeline", n) not in names_seen:
                fail(f"no '{n}' span under --pp")
    for c in ["mlp", "head", "router", "experts"]:
        if c not in cats_seen:
            fail(f"no '{c}' spans on any rank")

    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print(f"ok: {len(a.files)} trace(s), comm {a.comm}{' dp' if a.dp else ''}"
          f"{' zero1' if a.zero1 else ''}{' pp' if a.pp else ''}: categories "
          f"{sorted(c for c in cats_seen if c)}")


if __name__ == "__main__":
    main()
