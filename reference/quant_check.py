#!/usr/bin/env python3
"""Bit-exact check of moet's FP8 / bf16 quantizers against an independent NumPy + ml_dtypes
reference.  Exit status 0 iff every case matches.

usage: quant_check.py --quant-dump build/tests/quant_dump [--workdir DIR] [-v]
Needs numpy and ml_dtypes (the project venv: PY=$(bash scripts/venv.sh)).

The rules checked (moet's claim; written here from the spec, not from moet's C++):
- Blocks: b = 32 (mxfp8) or 128 (fp8-blockwise).  Axis rows: b consecutive elements of a row;
  cols: b consecutive rows of a column; square (fp8-blockwise only, mxfp8 must refuse): b x b.
  Blocks tile from index 0; a last partial block acts as if the tensor were zero-padded.
  Scales are row-major over the block grid ([R, ceil(C/b)], [ceil(R/b), C], or both ceil'd).
- amax = max |x| over the block ignoring NaN (fmaxf); all-NaN / all-zero -> 0.
- mxfp8 (Transformer Engine MXFP8): v = f32(amax * f32(1/448)); e = float_to_e8m0(v):
  NaN -> 255, +Inf -> 254, 0 -> 0, else with E, m = exponent and mantissa bits of v:
  e = E + (m > 0 and E != 254 and not (E == 0 and m <= 0x400000)).
  mult = 1 if e == 0 else f32 with bits (254 - e) << 23 (+0.0 for e == 254);
  dequantisation scale 2^(e - 127) (e == 0 -> 2^-127, subnormal; e == 255 -> NaN).
- fp8-blockwise (TE Float8BlockScaling, power-of-two scales, eps 0): s = 1 if amax is 0, Inf
  or NaN, else f32(448 / amax), Inf -> FLT_MAX, then bits & 0xFF800000 (round down to 2^k).
  mult = s, dequantisation scale = f32(1 / s).
- code = E4M3FN(f32(x * mult)), round to nearest even, saturating (finite beyond +-448 and
  +-Inf -> +-448, i.e. 0x7E / 0xFE); NaN -> 0x7F whatever its sign; -0.0 -> 0x80.
- value = f32(e4m3(code) * dequantisation scale); NaN code -> NaN.
- values.bf16 = bf16 RNE of value; claimed exact unless |value| is in bf16's subnormal range
  (< 2^-126).  Format bf16: values.bf16 = bf16 RNE of x (NaN stays NaN), values.f32 = widened.
Codes and scales are compared byte for byte; values by bits (NaN positions must match, any
payload is accepted).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

F32, U8, U16, U32 = np.float32, np.uint8, np.uint16, np.uint32
E4M3, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16
FLT_MAX = np.finfo(F32).max
BLOCK = {"mxfp8": 32, "fp8-blockwise": 128}
AXES = {"mxfp8": ("rows", "cols"), "fp8-blockwise": ("rows", "cols", "square"), "bf16": ("rows",)}
MIN_NORMAL = F32(2.0**-126)


def bits(a):
    return np.ascontiguousarray(a, dtype=F32).view(U32)


def from_bits(u):
    return np.ascontiguousarray(u, dtype=U32).view(F32)


# ------------------------------------------------------------------ reference
def block_amax(x, b, axis):
    """amax per block over the block grid (NaN ignored, zero padding)."""
    R, C = x.shape
    Rp = -(-R // b) * b if axis in ("cols", "square") else R
    Cp = -(-C // b) * b if axis in ("rows", "square") else C
    p = np.zeros((Rp, Cp), F32)
    p[:R, :C] = np.abs(x)
    fmax = lambda a, ax: np.fmax.reduce(a, axis=ax, initial=F32(0))  # noqa: E731
    if axis == "rows":
        return fmax(p.reshape(R, Cp // b, b), 2)
    if axis == "cols":
        return fmax(p.reshape(Rp // b, b, C), 1)
    return fmax(fmax(p.reshape(Rp // b, b, Cp // b, b), 3), 1)


def expand(g, b, axis, shape):
    """Per-block grid -> per-element array of `shape`."""
    if axis in ("cols", "square"):
        g = np.repeat(g, b, axis=0)
    if axis in ("rows", "square"):
        g = np.repeat(g, b, axis=1)
    return g[: shape[0], : shape[1]]


def mxfp8_scale(amax):
    """-> (E8M0 code uint8, mult f32, dequantisation scale f32) per block."""
    with np.errstate(over="ignore"):
        v = amax * (F32(1) / F32(448))  # f32 multiply by the f32 reciprocal
    u = bits(v).astype(np.int64)
    E, m = (u >> 23) & 0xFF, u & 0x7FFFFF
    e = E + ((m > 0) & (E != 254) & ~((E == 0) & (m <= 0x400000)))
    e = np.where(np.isnan(v), 255, np.where(np.isposinf(v), 254, np.where(v == 0, 0, e)))
    mult = np.where(e == 0, F32(1), from_bits((np.clip(254 - e, 0, 254) << 23).astype(U32)))
    deq = np.where(e == 255, F32(np.nan), np.ldexp(F32(1), (e - 127).astype(np.int32)))
    return e.astype(U8), mult.astype(F32), deq.astype(F32)


def fp8block_scale(amax):
    """-> (dequantisation scale f32 as stored, mult f32, dequantisation scale f32)."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = F32(448) / amax
    s = np.where(np.isinf(s), FLT_MAX, s).astype(F32)
    s = from_bits(bits(s) & U32(0xFF800000))
    s = np.where((amax == 0) | ~np.isfinite(amax), F32(1), s).astype(F32)
    deq = F32(1) / s
    return deq, s, deq


def e4m3_codes(y):
    y = np.clip(y, F32(-448), F32(448))  # saturate; NaN passes through
    with np.errstate(invalid="ignore"):
        c = y.astype(E4M3).view(U8).copy()
    c[np.isnan(y)] = 0x7F
    return c


def reference(fmt, axis, x):
    """The files quant_dump should write, as {name: array}."""
    if fmt == "bf16":
        with np.errstate(invalid="ignore"):
            vb = x.astype(BF16)
        return {"values.f32": vb.astype(F32), "values.bf16": vb.view(U16)}
    b = BLOCK[fmt]
    amax = block_amax(x, b, axis)
    scales, mult, deq = (mxfp8_scale if fmt == "mxfp8" else fp8block_scale)(amax)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x * expand(mult, b, axis, x.shape)  # f32 multiply
        codes = e4m3_codes(y)
        val = codes.view(E4M3).astype(F32) * expand(deq, b, axis, x.shape)
    return {"codes.u8": codes, "scales": scales.reshape(-1), "values.f32": val,
            "values.bf16": val.astype(BF16).view(U16), "_amax": amax.reshape(-1)}


# ------------------------------------------------------------------ test data
def rand_bits(rng, n):
    return from_bits(rng.integers(0, 2**32, n, dtype=np.uint64).astype(U32))


def spread(rng, shape, lo, hi):
    """Normal data times 2^uniform(lo, hi) (saturating to Inf past FLT_MAX)."""
    with np.errstate(over="ignore"):
        return (rng.standard_normal(shape) * np.exp2(rng.uniform(lo, hi, shape))).astype(F32)


def generic_cases(rng):
    """(name, x) run through every format and axis."""
    cs = [(f"normal*1e{p}", (rng.standard_normal((256, 256)) * 10.0**p).astype(F32))
          for p in (-30, -20, -10, 0, 10, 20, 30)]
    cs.append(("spread 2^+-60", spread(rng, (256, 256), -60, 60)))
    cs.append(("spread 2^-150..2^128", spread(rng, (256, 256), -150, 128)))
    cs.append(("random bits", rand_bits(rng, 256 * 256).reshape(256, 256)))
    lo16 = rng.choice(np.array([0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF], U32), 64 * 256)
    hi16 = rng.integers(0, 2**16, 64 * 256).astype(U32)
    t = (hi16 << 16) | lo16
    t[:12] = [0x7F800001, 0xFF800001, 0x7FC00000, 0xFFC00001, 0x7F7FFFFF, 0x7F7F8000,
              0x7F7E8000, 0x00008000, 0x00018000, 0x80008000, 0x7F800000, 0x80000000]
    cs.append(("bf16 ties / NaN payloads", from_bits(t).reshape(64, 256)))
    for shp in ((70, 150), (1, 33), (129, 1), (200, 300), (33, 1), (1, 1), (3, 257)):
        cs.append((f"partial {shp[0]}x{shp[1]}", spread(rng, shp, -10, 10)))
    x = spread(rng, (200, 300), -20, 20)
    x[rng.random(x.shape) < 0.02] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    cs.append(("partial 200x300 NaN/Inf", x))
    cs.append(("large 512x1024", rng.standard_normal((512, 1024)).astype(F32)))
    return cs


# E4M3 rounding ties (and their neighbours) in the scaled domain: subnormal 2^-10, 3, 5, 7,
# 15 x 2^-10; normal ties 1.0625, 1.1875, 1.9375, 2^-6 * 17/16, 232, 432.
TIES = np.array([2**-10, 3 * 2**-10, 5 * 2**-10, 7 * 2**-10, 15 * 2**-10, 1.0625, 1.1875,
                 1.9375, 2**-6 * 17 / 16, 232.0, 432.0], F32)


def edge_blocks(fmt, rng):
    """[n, b] float32: one row per block, each meant to exercise one edge."""
    b = BLOCK[fmt]
    scale = mxfp8_scale if fmt == "mxfp8" else fp8block_scale
    inf, nan = F32(np.inf), F32(np.nan)
    sub = from_bits(rng.integers(1, 0x800000, b).astype(U32) | (rng.integers(0, 2, b).astype(U32) << 31))
    blocks = [np.zeros(b, F32), np.where(np.arange(b) % 2, F32(-0.0), F32(0)), sub,
              np.where(np.arange(b) % 3 == 0, sub, F32(1.5)),
              np.where(np.arange(b) % 2, F32(-0.0), from_bits(U32(1))[0]),
              np.full(b, nan), from_bits(np.full(b, 0xFFC00000, U32)),
              np.where(np.arange(b) % 2, nan, F32(0)), np.where(np.arange(b) % 4, F32(-0.0), nan)]
    big = np.array([inf, 1000, -5000, 449, 464, 463.9, 447.9, 1e30, -1e38, FLT_MAX, -inf, nan], F32)
    for head in ([inf], [-inf], [inf, nan], [inf, -inf], [nan] + list(big[1:10]), list(big),
                 [FLT_MAX, -FLT_MAX], [from_bits(U32(0x7F800001))[0], 3.0, -2.0]):
        blk = (rng.standard_normal(b) * 100).astype(F32)
        blk[: len(head)] = head
        blocks.append(blk)
    ks = list(range(-149, -109)) + [-60, -20, -8, -1, 0, 1, 7, 20, 60] + list(range(110, 120))
    for k in ks:
        a0 = F32(np.ldexp(448.0, k))
        for amax in (np.nextafter(a0, F32(0)), a0, np.nextafter(a0, F32(np.inf))):
            if amax == 0 or np.isinf(amax):
                continue
            blk = (amax * rng.uniform(-1, 1, b).astype(F32)).astype(F32)
            blk[0] = amax if k % 2 else -amax
            _, mult, _ = scale(np.array([amax], F32))
            if mult[0] not in (0, 1):  # place exact E4M3 ties / neighbours after scaling
                t = np.concatenate([TIES, np.nextafter(TIES, F32(0)), np.nextafter(TIES, F32(np.inf))])
                with np.errstate(under="ignore", over="ignore"):
                    xt = (t / mult[0]).astype(F32)
                    ok = (xt * mult[0] == t) & (np.abs(xt) <= amax)
                xt = xt[ok][: b - 1] * rng.choice(np.array([-1, 1], F32), ok.sum())[: b - 1]
                blk[1 : 1 + len(xt)] = xt
            blocks.append(blk)
    return np.stack([rng.permutation(blk) for blk in blocks]).astype(F32)


def layout(blocks, axis):
    """Place each block (a row of `blocks`) as one block of `axis`'s grid."""
    n, b = blocks.shape
    if axis == "rows":
        return blocks.copy()
    if axis == "cols":
        return np.ascontiguousarray(blocks.T)
    idx = (np.arange(b)[None, :] - np.arange(b)[:, None]) % b  # square: row r = block rolled r
    return np.ascontiguousarray(blocks[:, idx].transpose(1, 0, 2).reshape(b, n * b))


def all_cases(rng):
    """(name, fmt, axis, x) for every run."""
    out = [(n, f, a, x) for n, x in generic_cases(rng) for f in AXES for a in AXES[f]]
    for fmt in BLOCK:
        blocks = edge_blocks(fmt, rng)
        for a in AXES[fmt]:
            x = layout(blocks, a)
            out.append((f"edge blocks ({len(blocks)})", fmt, a, x))
            cut = x[:, : BLOCK[fmt] - 7] if a == "rows" else x[: BLOCK[fmt] - 7]
            out.append(("edge blocks, partial", fmt, a, np.ascontiguousarray(cut)))
        out.append((f"edge blocks ({len(blocks)})", "bf16", "rows", blocks))
    return out


# ------------------------------------------------------------------ running and comparing
def run_dump(exe, fmt, axis, x, d):
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    x.astype("<f4").tofile(os.path.join(d, "in.f32"))
    cmd = [exe, fmt, axis, str(x.shape[0]), str(x.shape[1]), os.path.join(d, "in.f32"), d]
    return subprocess.run(cmd, capture_output=True, text=True)


def as_bits(name, a):
    """Comparable integer bits and a NaN mask for one output file's array."""
    if name == "values.bf16":
        return a.astype(U32), np.isnan(from_bits(a.astype(U32) << 16))
    if name == "values.f32" or a.dtype == F32:
        return bits(a), np.isnan(a)
    return a.astype(U32), np.zeros(a.shape, bool)


def compare(fmt, axis, x, ref, d, nshow):
    """-> list of problem strings (empty when moet matches the reference)."""
    problems = []
    dt = {"codes.u8": U8, "values.f32": F32, "values.bf16": U16,
          "scales": U8 if fmt == "mxfp8" else F32}
    for name, want in ref.items():
        if name.startswith("_"):
            continue
        path = os.path.join(d, name)
        if not os.path.exists(path):
            problems.append(f"{name}: missing")
            continue
        got = np.fromfile(path, dtype=np.dtype(dt[name]).newbyteorder("<"))
        want = want.reshape(-1)
        if got.size != want.size:
            problems.append(f"{name}: {got.size} entries, want {want.size}")
            continue
        (gb, gn), (wb, wn) = as_bits(name, got), as_bits(name, want)
        bad = np.flatnonzero(((gb != wb) & ~(gn & wn)) | (gn != wn))
        if bad.size == 0:
            continue
        per_elem = name != "scales"
        src = bits(x).reshape(-1) if per_elem else bits(ref["_amax"])
        w = {"codes.u8": 2, "values.f32": 8, "values.bf16": 4}.get(name, 2 if fmt == "mxfp8" else 8)
        shown = []
        for i in bad[:nshow]:
            where = f"({i // x.shape[1]},{i % x.shape[1]})" if per_elem else f"block {i}"
            what = "x" if per_elem else "amax"
            shown.append(f"{where} {what}=0x{src[i]:08x} moet=0x{gb[i]:0{w}x} ref=0x{wb[i]:0{w}x}")
        problems.append(f"{name}: {bad.size} mismatches: " + "; ".join(shown))
    return problems


def bf16_inexact(ref):
    """For an FP8 run: #values whose bf16 rounding is inexact, #of those at |v| >= 2^-126 (where
    exactness is claimed), #nonzero values below bf16's smallest subnormal 2^-133."""
    v = ref["values.f32"].reshape(-1)
    back = from_bits(ref["values.bf16"].reshape(-1).astype(U32) << 16)
    bad = (bits(back) != bits(v)) & ~np.isnan(v)
    tiny = (v != 0) & (np.abs(v) < F32(2.0**-133))
    return int(bad.sum()), int((bad & (np.abs(v) >= MIN_NORMAL)).sum()), int(tiny.sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quant-dump", required=True, help="path of build/tests/quant_dump")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    ap.add_argument("-v", "--verbose", action="store_true", help="more mismatches and detail")
    args = ap.parse_args()
    exe = os.path.abspath(args.quant_dump)
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="quant_check.")
    work = args.workdir or tmp.name
    nshow = 10 if args.verbose else 3
    rng = np.random.default_rng(20240607)
    failed = n = inexact = inexact_normal = tiny = 0

    # mxfp8 has no square blocks: quant_dump must refuse
    r = run_dump(exe, "mxfp8", "square", np.ones((32, 32), F32), os.path.join(work, "refuse"))
    n += 1
    ok = r.returncode != 0
    failed += not ok
    print(f"{'OK  ' if ok else 'FAIL'} {'mxfp8 square is refused':28s} mxfp8         square [32, 32]"
          + ("" if ok else " (quant_dump accepted it)"))

    for name, fmt, axis, x in all_cases(rng):
        n += 1
        d = os.path.join(work, "case")
        r = run_dump(exe, fmt, axis, x, d)
        ref = reference(fmt, axis, x)
        problems = ([f"quant_dump exit {r.returncode}: {r.stderr.strip()}"] if r.returncode
                    else compare(fmt, axis, x, ref, d, nshow))
        note = ""
        if fmt != "bf16":
            k, kn, kt = bf16_inexact(ref)
            inexact, inexact_normal, tiny = inexact + k, inexact_normal + kn, tiny + kt
            if kn:
                problems.append(f"bf16 claim: {kn} values >= 2^-126 are not exact in bf16")
            if k or args.verbose:
                note = f"  (bf16 inexact: {k}, all below 2^-126)" if not kn else ""
        failed += bool(problems)
        print(f"{'FAIL' if problems else 'OK  '} {name:28s} {fmt:13s} {axis:6s} "
              f"{list(x.shape)}{note}")
        for p in problems:
            print(f"       {p}")
    print(f"\n{n} cases, {n - failed} OK, {failed} FAIL")
    print(f"values.bf16 of FP8 runs: {inexact} values not exact in bf16 ({inexact_normal} of them at "
          f"|v| >= 2^-126, where exactness is claimed); {tiny} nonzero values below 2^-133")
    if tmp:
        tmp.cleanup()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
