#!/usr/bin/env python3
"""Bit-exact check of moet's NVFP4 and MXFP4 quantizers (tests/quant_dump) against a NumPy +
ml_dtypes reference written from Transformer Engine's formulas, and of NVFP4 against torchao's
nvfp4_quantize.  Exit status 0 iff every case matches.

usage: fp4_check.py --quant-dump build/tests/quant_dump [--workdir DIR] [-v]
Needs numpy, ml_dtypes and torchao (the project venv: PY=$(bash scripts/venv.sh)).

The rules (written here from TE's transformer_engine/pytorch/custom_recipes/reference_nvfp4.py
and common/cast/nvfp4/core_nvfp4.cuh, not from moet's C++), fp32 throughout:
- amax = max |x| over the tensor (after the transform for rows-rht), NaN ignored.
- NVFP4 global: g = 2688 / amax (Inf -> FLT_MAX); g = 1 when amax is 0 or g is 0; g_dec = 1 / g.
- NVFP4 block (1x16 along rows, or 16x16 squares; zero padding): s = block_amax * (g * f32(1/6)),
  min FLT_MAX, clip 448, to E4M3 (RNE, subnormals kept) = dec; enc = min(1 / (dec * g_dec),
  FLT_MAX); code = E2M1(clip(x * enc, +-6)) RNE, NaN -> +6 (cvt satfinite); value = code * dec.
- MXFP4 block (1x32): e = ceil(log2(f32(block_amax / 6))) exactly, clipped to [-127, 127]
  (log2(0) = -inf -> -127, log2(inf) -> 127); dec = 2^e; enc = 1 / dec; code and value as for NVFP4.
- rows-rht: each 16 consecutive elements of a row, x -> x * s (TE's sign vector), four butterfly
  stages (i, i+h) -> (a + b, a - b) for h = 1, 2, 4, 8, then * 0.25: x @ diag(s) @ H16 / 4.  The
  same transform in float64 from TE's matrix (sign_mat @ H, scaled 1/sqrt(16)) agrees to fp32
  rounding (checked), which pins down the convention.
- scales.f32: R x ceil(C/b), a square's scale repeated on its 16 rows; values.bf16 = bf16(values).
The same rules hold reference/quant.py's torch quantizer (the golden files' 4-bit recipes) bit
for bit on every case.
torchao (0.18, pure PyTorch, CPU): nvfp4_quantize(x, per_tensor_scale=amax / 2688) on rows and
on the transformed rows; its codes and scales must equal moet's bit for bit on every block whose
E4M3 scale is normal (>= 2^-6): it clamps smaller scales up to 2^-6 where TE keeps subnormals.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from quant_check import run_dump  # writes in.f32, runs quant_dump FORMAT LAYOUT R C IN OUTDIR

F32, U16, U32 = np.float32, np.uint16, np.uint32
E4M3, E2M1, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn, ml_dtypes.bfloat16
FLT_MAX = np.finfo(F32).max
TE_SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], F32)
BLOCK = {"nvfp4": 16, "mxfp4": 32}
COVERAGE = {"subnormal E4M3 scales": 0, "zero scales": 0, "saturated (448) scales": 0}
LAYOUTS = (("nvfp4", "rows"), ("nvfp4", "square"), ("nvfp4", "rows-rht"), ("mxfp4", "rows"))


def bits(a):
    return np.ascontiguousarray(a, dtype=F32).view(U32)


# ------------------------------------------------------------------ reference
def hadamard_rows(x):
    """TE's reference transform along rows, in fp32 butterflies (C % 16 == 0)."""
    R, C = x.shape
    v = (x.reshape(R, C // 16, 16) * TE_SIGNS).astype(F32)
    for h in (1, 2, 4, 8):
        idx = np.array([i for i in range(16) if not i & h])
        a, b = v[..., idx].copy(), v[..., idx + h].copy()
        v[..., idx], v[..., idx + h] = a + b, a - b
    return (v * F32(0.25)).reshape(R, C)


def hadamard_rows_f64(x):
    """The same from TE's matrix: x @ (diag(s) @ H16) / sqrt(16), in float64."""
    h = np.ones((1, 1))
    while h.shape[0] < 16:
        h = np.block([[h, h], [h, -h]])
    m = np.diag(TE_SIGNS.astype(np.float64)) @ h / 4.0
    R, C = x.shape
    return (x.astype(np.float64).reshape(R, C // 16, 16) @ m).reshape(R, C)


def block_amax(x, b, square):
    R, C = x.shape
    Rp, Cp = (-(-R // b) * b if square else R), -(-C // b) * b
    p = np.zeros((Rp, Cp), F32)
    p[:R, :C] = np.abs(x)
    fmax = lambda a, ax: np.fmax.reduce(a, axis=ax, initial=F32(0))  # noqa: E731
    if not square:
        return fmax(p.reshape(R, Cp // b, b), 2)
    return fmax(fmax(p.reshape(Rp // b, b, Cp // b, b), 3), 1)


def global_scale(amax):
    with np.errstate(divide="ignore", over="ignore"):
        g = F32(2688) / F32(amax)
    g = F32(min(g, FLT_MAX))
    if amax == 0 or g == 0:
        g = F32(1)
    return g, F32(1) / g


def nvfp4_block_scales(bam, g, g_dec):
    """-> (dec, enc) per block."""
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        s = np.minimum(bam * (g * (F32(1) / F32(6))), FLT_MAX).astype(F32)
        dec = np.clip(s, 0, F32(448)).astype(E4M3).astype(F32)
        enc = np.minimum(F32(1) / (dec * g_dec), FLT_MAX).astype(F32)
    return dec, enc


def mxfp4_block_scales(bam):
    v = (bam / F32(6)).astype(F32)
    m, e = np.frexp(v)  # v = m * 2^e, m in [0.5, 1): ceil(log2 v) = e - 1 iff m == 0.5
    e = np.where(m == 0.5, e - 1, e)
    e = np.clip(np.where(v == 0, -127, np.where(np.isinf(v), 127, e)), -127, 127)  # log2(inf)
    dec = np.ldexp(F32(1), e).astype(F32)
    return dec, (F32(1) / dec).astype(F32)


def e2m1(y):
    y = np.where(np.isnan(y), F32(6), np.clip(y, F32(-6), F32(6)))
    return y.astype(E2M1).astype(F32)


def reference(fmt, layout, x):
    """The files quant_dump should write, as {name: array}."""
    b = BLOCK[fmt]
    xt = hadamard_rows(x) if layout == "rows-rht" else x
    amax = F32(np.fmax.reduce(np.abs(xt), axis=None, initial=F32(0)))
    square = layout == "square"
    bam = block_amax(xt, b, square)
    if fmt == "nvfp4":
        dec, enc = nvfp4_block_scales(bam, *global_scale(amax))
    else:
        dec, enc = mxfp4_block_scales(bam)
    R, C = x.shape
    rep = lambda g: np.repeat(np.repeat(g, b, 0) if square else g, b, 1)[:R, :C]  # noqa: E731
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        codes = e2m1((xt * rep(enc)).astype(F32))
        values = (codes * rep(dec)).astype(F32)
    row_dec = np.repeat(dec, b, 0)[:R] if square else dec
    return {"codes.f32": codes, "scales.f32": row_dec, "amax.f32": np.array([amax], F32),
            "values.f32": values, "values.bf16": values.astype(BF16).view(U16)}


# ------------------------------------------------------------------ torchao
def torchao_rows(xt, amax):
    """torchao's nvfp4_quantize on rows (C % 16 == 0) -> (codes f32, scales f32)."""
    import torch
    from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    t = torch.from_numpy(np.ascontiguousarray(xt))
    scale, packed = nvfp4_quantize(t, 16, per_tensor_amax_to_scale(torch.tensor(amax)))
    codes = f4_unpacked_to_f32(unpack_uint4(packed)).reshape(xt.shape).numpy()
    return codes, scale.to(torch.float32).reshape(xt.shape[0], -1).numpy()


def torchao_compare(layout, x, got):
    """Blocks with a normal E4M3 scale where torchao differs from moet -> (#compared, problems)."""
    xt = hadamard_rows(x) if layout == "rows-rht" else x
    codes, scales = torchao_rows(xt, got["amax.f32"][0])
    R, C = x.shape
    normal = got["scales.f32"].reshape(R, -1) >= 2.0**-6
    same_scale = bits(scales) == bits(got["scales.f32"].reshape(R, -1))
    same_codes = (bits(codes) == bits(got["codes.f32"].reshape(R, C))).reshape(R, -1, 16).all(2)
    bad = np.flatnonzero((normal & ~(same_scale & same_codes)).reshape(-1))
    problems = [f"torchao differs on {bad.size} of {normal.sum()} normal-scale blocks, first "
                f"{[divmod(int(i), normal.shape[1]) for i in bad[:3]]}"] if bad.size else []
    return int(normal.sum()), problems


# ------------------------------------------------------------------ test data
def spread(rng, shape, lo, hi):
    return (rng.standard_normal(shape) * np.exp2(rng.uniform(lo, hi, shape))).astype(F32)


def tie_tensor(rng, k):
    """Blocks whose x * enc land exactly on E2M1 rounding ties (and their fp32 neighbours): the
    tensor amax 2688 * 2^k makes g = 2^-k, a block amax 6 * 2^(m+k) makes dec = 2^m exactly."""
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 0.5, 6.0], F32)
    rows = []
    for m in range(-9, 9):
        t = np.concatenate([ties, np.nextafter(ties[:3], F32(0)), np.nextafter(ties[:3], F32(9))])
        blk = np.concatenate([[F32(6)], t])[:16] * rng.choice(np.array([-1, 1], F32), 16)
        rows.append(np.ldexp(blk, m + k).astype(F32))
    x = np.stack(rows).reshape(-1, 32)
    x[0, 0] = np.ldexp(F32(2688), k)
    return x


def cases(rng):
    """(name, x) run through every layout that takes its shape."""
    cs = [(f"normal*2^{p}", (rng.standard_normal((256, 256)) * 2.0**p).astype(F32))
          for p in (-40, -20, 0, 20, 40)]
    cs += [("spread 2^+-40 (subnormal scales)", spread(rng, (256, 256), -40, 40)),
           ("spread 2^+-10", spread(rng, (128, 512), -10, 10)),
           ("zeros", np.zeros((32, 64), F32)),
           ("tie blocks 2^0", tie_tensor(rng, 0)), ("tie blocks 2^-30", tie_tensor(rng, -30)),
           ("tie blocks 2^30", tie_tensor(rng, 30)), ("large 512x1024", spread(rng, (512, 1024), -3, 3))]
    z = spread(rng, (64, 128), -5, 5)
    z[:, 16:48] = 0
    z[10:20, 70:75] = 2.0**-30  # tiny blocks: E4M3-subnormal and zero decode scales
    cs.append(("zero and tiny blocks", z))
    inf = spread(rng, (32, 64), -5, 5)
    inf[3, 7] = np.inf
    inf[9, 40] = -np.inf
    cs.append(("Inf (g = 1, saturated scales)", inf))
    nan = spread(rng, (32, 64), -5, 5)
    nan[rng.random(nan.shape) < 0.03] = np.nan
    cs.append(("NaN (+6, amax ignores it)", nan))
    for shp in ((70, 150), (1, 33), (33, 17), (17, 1), (3, 257), (70, 160), (33, 16)):
        cs.append((f"partial {shp[0]}x{shp[1]}", spread(rng, shp, -10, 10)))
    return cs


# ------------------------------------------------------------------ running and comparing
def read_dump(d, ref):
    dt = {"values.bf16": U16}
    return {n: np.fromfile(os.path.join(d, n), dtype=np.dtype(dt.get(n, F32)).newbyteorder("<"))
            for n in ref if os.path.exists(os.path.join(d, n))}


def compare(ref, got, nshow):
    problems = []
    for name, want in ref.items():
        if name not in got:
            problems.append(f"{name}: missing")
            continue
        g, w = got[name], want.reshape(-1)
        if g.size != w.size:
            problems.append(f"{name}: {g.size} entries, want {w.size}")
            continue
        gb, wb = (g.astype(U32), w.astype(U32)) if g.dtype == U16 else (bits(g), bits(w))
        bad = np.flatnonzero(gb != wb)
        if bad.size:
            shown = "; ".join(f"[{i}] moet=0x{gb[i]:08x} ref=0x{wb[i]:08x}" for i in bad[:nshow])
            problems.append(f"{name}: {bad.size} mismatches: {shown}")
    return problems


def check_transform_convention(rng):
    """The butterfly transform equals TE's matrix formula to fp32 rounding."""
    x = spread(rng, (64, 256), -4, 4)
    err = np.abs(hadamard_rows(x) - hadamard_rows_f64(x)) / (np.abs(x).max() + 1e-30)
    return [] if err.max() < 1e-6 else [f"transform differs from TE's matrix by {err.max():.3g}"]


def run_case(exe, work, name, fmt, layout, x, nshow, torchao_blocks):
    r = run_dump(exe, fmt, layout, x, os.path.join(work, "case"))
    ref = reference(fmt, layout, x)
    if fmt == "nvfp4":
        s = ref["scales.f32"]
        COVERAGE["subnormal E4M3 scales"] += int(((s > 0) & (s < 2.0**-6)).sum())
        COVERAGE["zero scales"] += int((s == 0).sum())
        COVERAGE["saturated (448) scales"] += int((s == 448).sum())
    if r.returncode:
        return [f"quant_dump exit {r.returncode}: {r.stderr.strip()}"]
    got = read_dump(os.path.join(work, "case"), ref)
    problems = compare(ref, got, nshow)
    if fmt == "nvfp4" and layout != "square" and x.shape[1] % 16 == 0 and not problems \
            and not np.isnan(x).any() and not np.isinf(x).any():
        n, p = torchao_compare(layout, x, got)
        torchao_blocks[0] += n
        problems += p
    return problems


def options():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quant-dump", required=True, help="path of build/tests/quant_dump")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    ap.add_argument("-v", "--verbose", action="store_true", help="more mismatches")
    return ap.parse_args()


def main():
    args = options()
    with tempfile.TemporaryDirectory(prefix="fp4_check.") as tmp:
        return check_all(os.path.abspath(args.quant_dump), args.workdir or tmp,
                         10 if args.verbose else 3)


def check_torch_reference(fmt, layout, x):
    """reference/quant.py's torch quantizer (the golden files' recipe) against the rules above,
    bit for bit: values (e2m1 * dec) and, for NVFP4, the global decode scale; its transform (along
    the tokens, 16 rows) on the transposed rows."""
    import torch
    import quant
    want = reference(fmt, layout, x)
    xt = hadamard_rows(x) if layout == "rows-rht" else x
    if layout == "rows-rht":
        got_t = quant.hadamard16_rows(torch.from_numpy(np.ascontiguousarray(x.T))).numpy().T
        if not np.array_equal(bits(got_t), bits(xt)):
            return ["reference/quant.py's hadamard16_rows differs from the butterflies here"]
    values, g_dec = quant.fp4_quantize(torch.from_numpy(np.ascontiguousarray(xt)), fmt,
                                       "square" if layout == "square" else "rows")
    problems = []
    if not np.array_equal(bits(values.numpy()), bits(want["values.f32"])):
        problems.append("reference/quant.py's fp4_quantize values differ from the rules here")
    if fmt == "nvfp4":
        amax = want["amax.f32"][0]
        if float(g_dec) != float(global_scale(amax)[1]):
            problems.append(f"reference/quant.py's global decode scale {float(g_dec)!r}")
    return problems


def check_all(exe, work, nshow):
    rng = np.random.default_rng(20251201)
    torchao_blocks = [0]
    results = [("transform convention", "", "", (), check_transform_convention(rng))]
    r = run_dump(exe, "nvfp4", "rows-rht", np.ones((4, 24), F32), os.path.join(work, "refuse"))
    results.append(("rows-rht C=24 is refused", "nvfp4", "rows-rht", (4, 24),
                    [] if r.returncode else ["quant_dump accepted it"]))
    for name, x in cases(rng):
        for fmt, layout in LAYOUTS:
            if layout == "rows-rht" and x.shape[1] % 16:
                continue
            p = run_case(exe, work, name, fmt, layout, x, nshow, torchao_blocks)
            p += check_torch_reference(fmt, layout, x)
            results.append((name, fmt, layout, x.shape, p))
    failed = 0
    for name, fmt, layout, shape, problems in results:
        failed += bool(problems)
        print(f"{'FAIL' if problems else 'OK  '} {name:34s} {fmt:6s} {layout:9s} {list(shape)}")
        for p in problems:
            print(f"       {p}")
    print(f"\n{len(results)} cases, {len(results) - failed} OK, {failed} FAIL; torchao agreed on "
          f"{torchao_blocks[0]} normal-scale NVFP4 blocks")
    print("NVFP4 scale rows compared: " + ", ".join(f"{v} {k}" for k, v in COVERAGE.items()))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
