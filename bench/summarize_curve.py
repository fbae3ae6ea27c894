#!/usr/bin/env python3
"""Prints a Markdown table of a `moet train --metrics` JSONL file (docs/training.md).

usage: bench/summarize_curve.py METRICS.jsonl [--every N]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics")
    ap.add_argument("--every", type=int, default=25)
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(a.metrics)]
    print("| step | loss | lm loss | mtp loss | held-out lm loss | lr | grad norm | max/mean expert load | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["step"] != 1 and r["step"] % a.every and r["step"] != len(rows):
            continue
        ev = r.get("eval_loss")
        print(f"| {r['step']} | {r['loss']:.3f} | {r['lm_loss']:.3f} | {r.get('mtp_loss', float('nan')):.3f} | "
              f"{'' if ev is None else f'{ev:.3f}'} | {r['lr']:.2e} | {r['grad_norm']:.2f} | "
              f"{r['max_expert_load']:.2f} | {r['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
