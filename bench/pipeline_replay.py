#!/usr/bin/env python3
"""Replays one training step's pipeline passes from moet's per-rank traces (docs/trace.md,
`pass` spans): each pass in its rank's order, starting when the rank is free and its input is
there (a forward after the previous stage's forward of the micro-batch, a backward or I after
the next stage's backward or I), taking the compute it took in the run (its span less the
`pipeline` waits for messages inside it). Prints each rank's idle time in the replay (the
replayed step's end less the rank's compute) — what the schedule alone makes of the measured
passes, with no message latency or engine overhead.

With --equal, every pass takes the mean of its kind (F, B, I, W, F&B) over all ranks instead
of its own time: the stages made equal, as the schedules' bubble formulas assume.

Usage: pipeline_replay.py --placement line|v [--equal] TRACE.rank0.json TRACE.rank1.json ...
(line: stage = rank, one chunk; v: chunk 0 on stage r, chunk 1 on stage 2P-1-r).
"""
import argparse
import json
import re
import statistics

PASS = re.compile(r"([FBIW]) (\d+)\.(\d+)")


def last_step_passes(path):
    ev = json.load(open(path))["traceEvents"]
    step = [e for e in ev if e.get("cat") == "step"][-1]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    inside = lambda e, a, b: e["ts"] >= a and e["ts"] + e["dur"] <= b
    waits = [e for e in ev if e.get("cat") == "pipeline" and e.get("ph") == "X"
             and e["name"] != "wait for sends" and inside(e, lo, hi)]
    out = []
    for p in sorted((e for e in ev if e.get("cat") == "pass" and inside(e, lo, hi)),
                    key=lambda e: e["ts"]):
        waited = sum(w["dur"] for w in waits if inside(w, p["ts"], p["ts"] + p["dur"]))
        ops = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in PASS.finditer(p["name"])]
        out.append((ops, (p["dur"] - waited) / 1e6))
    return out


def replay(lists, placement):
    P = len(lists)
    S = P if placement == "line" else 2 * P
    stage = lambda r, c: r if placement == "line" else (r if c == 0 else 2 * P - 1 - r)
    done, free, at = {}, [0.0] * P, [0] * P
    moved = True
    while moved:
        moved = False
        for r in range(P):
            while at[r] < len(lists[r]):
                ops, busy = lists[r][at[r]]
                start, ready = free[r], True
                for op, m, c in ops:
                    k = stage(r, c)
                    dep = (("F", m, k - 1) if op == "F" and k > 0 else
                           ("I", m, k + 1) if op in "BI" and k < S - 1 else None)
                    if dep is not None:
                        if dep not in done:
                            ready = False
                            break
                        start = max(start, done[dep])
                if not ready:
                    break
                for op, m, c in ops:
                    done[("F" if op == "F" else "I" if op in "BI" else "W", m, stage(r, c))] = start + busy
                free[r] = start + busy
                at[r] += 1
                moved = True
    if any(at[r] < len(lists[r]) for r in range(P)):
        raise SystemExit("the passes do not replay: a dependency never completes")
    end = max(free)
    return [end - sum(b for _, b in lists[r]) for r in range(P)]


def equalized(lists):
    kind = lambda ops: "&".join(op for op, _, _ in ops)
    times = {}
    for passes in lists:
        for ops, busy in passes:
            times.setdefault(kind(ops), []).append(busy)
    mean = {k: statistics.mean(v) for k, v in times.items()}
    return [[(ops, mean[kind(ops)]) for ops, _ in passes] for passes in lists]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", choices=["line", "v"], required=True)
    ap.add_argument("--equal", action="store_true", help="each pass at its kind's mean time")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    lists = [last_step_passes(t) for t in a.traces]
    idle = replay(equalized(lists) if a.equal else lists, a.placement)
    print(" ".join(f"{x:.4f}" for x in idle))


if __name__ == "__main__":
    main()
