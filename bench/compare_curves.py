#!/usr/bin/env python3
"""Training curves of several runs side by side (docs/training.md): a Markdown table of the
held-out and (25-step mean) training losses, the final held-out loss of each run against the
first, and an SVG plot of both curves.

usage: bench/compare_curves.py NAME=METRICS.jsonl ... [--svg OUT.svg] [--every 50]
"""
import argparse
import json
import statistics


def load(path):
    return [json.loads(l) for l in open(path)]


def svg_plot(runs, path, key, title, width=640, height=300):
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]
    series = []
    for name, rows in runs:
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if key == "loss":  # 25-step running mean
            pts = [(pts[i][0], statistics.mean(v for _, v in pts[max(0, i - 24):i + 1]))
                   for i in range(len(pts))]
        series.append((name, pts))
    xs = [x for _, p in series for x, _ in p]
    ys = [y for _, p in series for _, y in p]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    pad = 0.05 * (y1 - y0 or 1)
    y0, y1 = y0 - pad, y1 + pad
    L, R, T, B = 55, 130, 30, 40
    sx = lambda x: L + (x - x0) / (x1 - x0 or 1) * (width - L - R)
    sy = lambda y: T + (y1 - y) / (y1 - y0) * (height - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="13">{title}</text>']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<line x1="{L}" x2="{width - R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 5}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{sx(x):.1f}" y="{height - B + 15}" text-anchor="middle">{x:.0f}</text>')
    out.append(f'<text x="{(L + width - R) / 2}" y="{height - 8}" text-anchor="middle">step</text>')
    for k, (name, pts) in enumerate(series):
        c = colors[k % len(colors)]
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{d}"/>')
        out.append(f'<text x="{width - R + 8}" y="{T + 16 * k + 10}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="NAME=METRICS.jsonl")
    ap.add_argument("--svg", default="", help="write the plots to OUT.svg and OUT-train.svg")
    ap.add_argument("--every", type=int, default=50)
    a = ap.parse_args()
    runs = [(r.split("=", 1)[0], load(r.split("=", 1)[1])) for r in a.runs]
    names = [n for n, _ in runs]
    print("| step | " + " | ".join(f"{n} held-out | {n} train (25-step mean)" for n in names) + " |")
    print("|---|" + "---|---|" * len(names))
    steps = sorted({r["step"] for _, rows in runs for r in rows if r.get("eval_loss") is not None})
    for s in steps:
        cells = []
        for _, rows in runs:
            ev = next((r["eval_loss"] for r in rows if r["step"] == s), None)
            win = [r["loss"] for r in rows if s - 25 < r["step"] <= s]
            cells.append(f"{ev:.4f}" if ev is not None else "")
            cells.append(f"{statistics.mean(win):.4f}" if win else "")
        print(f"| {s} | " + " | ".join(cells) + " |")
    base = [r["eval_loss"] for r in runs[0][1] if r.get("eval_loss") is not None][-1]
    print(f"\nfinal held-out loss relative to {runs[0][0]}: " + ", ".join(
        f"{n} {[r['eval_loss'] for r in rows if r.get('eval_loss') is not None][-1]:.4f} "
        f"({100 * ([r['eval_loss'] for r in rows if r.get('eval_loss') is not None][-1] / base - 1):+.2f}%)"
        for n, rows in runs))
    if a.svg:
        svg_plot(runs, a.svg, "eval_loss", "held-out LM loss (nats/byte)")
        svg_plot(runs, a.svg.replace(".svg", "-train.svg"), "loss",
                 "training loss, 25-step running mean (LM + 0.3 MTP + balance)")


if __name__ == "__main__":
    main()
