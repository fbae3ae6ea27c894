#!/usr/bin/env python3
"""How far an implementation of a recipe may land from its float64 golden files: the numbers
test_golden's bounds are derived from (tests/test_golden.cpp).

usage: golden_bounds.py CONFIG PRECISION [--runs N] [--workdir DIR]

Writes the float64 golden files of PRECISION and of fp32, then N emulated implementations
(make_golden.py --dtype float32 --sr-seed k: float32 math, and under the 4-bit recipes other
stochastic-rounding draws than the golden's), and prints, worst over the N and beside the
recipe's own effect (the PRECISION golden against the fp32 one):
  logits         ||a - b|| / ||b||
  loss           largest relative error of loss, lm_loss, mtp_loss, balance_loss, z_loss
  all gradients  ||a - b|| / ||b|| over every gradient together
  one gradient   the largest per-tensor ||a - b|| / ||b||
  train loss     largest relative error of the 10 training steps' losses
  mean gradients (4-bit recipes) all gradients, each the mean over make_golden's FP4_DRAWS
                 backward passes (grad_mean.*); one mean grad: the largest per tensor
Debian's python3-torch suffices (no venv).
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from safetensors_io import load_file  # noqa: E402

LOSSES = ("loss", "lm_loss", "mtp_loss", "balance_loss", "z_loss")


def norm_err(a, b):
    den = float((b.double() ** 2).sum())
    num = float(((a.double() - b.double()) ** 2).sum())
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def measures(run_dir, golden_dir):
    a = load_file(os.path.join(run_dir, "step.safetensors"))
    b = load_file(os.path.join(golden_dir, "step.safetensors"))
    grads = sorted(n for n in b if n.startswith("grad."))
    num = sum(float(((a[n].double() - b[n].double()) ** 2).sum()) for n in grads)
    den = sum(float((b[n].double() ** 2).sum()) for n in grads)
    means = {}
    if any("grad_mean." + grads[0][5:] in t for t in (a, b)):
        mean_of = lambda t, n: t["grad_mean." + n[5:]] if "grad_mean." + n[5:] in t else t[n]  # noqa: E731
        num_m = sum(float(((mean_of(a, n).double() - mean_of(b, n).double()) ** 2).sum())
                    for n in grads)
        den_m = sum(float((mean_of(b, n).double() ** 2).sum()) for n in grads)
        means = {"mean gradients": math.sqrt(num_m / den_m),
                 "one mean grad": max(norm_err(mean_of(a, n), mean_of(b, n)) for n in grads)}
    ta = load_file(os.path.join(run_dir, "train.safetensors"))
    tb = load_file(os.path.join(golden_dir, "train.safetensors"))
    return {
        "logits": norm_err(a["logits"], b["logits"]),
        "loss": max(rel(float(a[k][0]), float(b[k][0])) for k in LOSSES),
        "all gradients": math.sqrt(num / den),
        "one gradient": max(norm_err(a[n], b[n]) for n in grads),
        "train loss": max(max(rel(float(x), float(y)) for x, y in zip(ta[k], tb[k]))
                          for k in ("losses", "lm_losses")),
        **means,
    }


def make(config, out, precision, extra=()):
    subprocess.run([sys.executable, os.path.join(HERE, "make_golden.py"), config, out,
                    "--precision", precision, *extra], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("config")
    ap.add_argument("precision")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="golden-bounds-")
    golden, fp32 = os.path.join(work, "golden"), os.path.join(work, "fp32")
    make(args.config, golden, args.precision)
    make(args.config, fp32, "fp32")
    worst = {}
    for k in range(1, args.runs + 1):
        d = os.path.join(work, f"run{k}")
        make(args.config, d, args.precision, ("--dtype", "float32", "--sr-seed", str(k)))
        for name, v in measures(d, golden).items():
            worst[name] = max(worst.get(name, 0.0), v)
    effect = measures(golden, fp32)
    print(f"{args.precision}: {args.runs} float32 implementations (other stochastic-rounding "
          f"draws) against the float64 golden; the recipe's effect is the golden against fp32's")
    for name in worst:
        print(f"  {name:14s} worst {worst[name]:.2e}   recipe effect {effect[name]:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
