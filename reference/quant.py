# Tolerance for "moet in precision P vs this reference in precision P" (tiny.json, golden spec)
# ----------------------------------------------------------------------------------------------
# Both sides quantize the same operands, except where moet's fp32 arithmetic (vs float64 here)
# puts an operand on the other side of a rounding boundary.  At a relative operand error eta
# the chance per element is about 2*eta*|x|/step, with step/|x| in [2^-4, 2^-3] for E4M3 and
# [2^-8, 2^-7] for bf16: ~20*eta and ~300*eta.  One step quantizes ~0.68M E4M3 + 0.65M bf16
# elements (FP8 recipes) or 1.33M bf16 elements (bf16); at eta = 2^-22 (a few fp32 ulps) that is
# ~1 E4M3 flip and 30-60 bf16 flips per step (measured on the golden data: 1 and 36-56).  Block
# scales flipping across a power of two cost nothing above E4M3's subnormals (power-of-two scales
# leave E4M3 rounding scale-invariant; only elements below ~2^-15 of a block's amax move), so
# they are negligible.  A flip is not small, though: one E4M3 step moves a GEMM output row by
# ~2^-3.5/sqrt(K) (~1.5% at K = 64), far beyond the next quantizer's boundaries, so flips cascade
# along that token's forward or gradient path and re-draw its rounding.  The difference is
# therefore bimodal: ~1e-7 when no flip matters, else a fraction of the recipe's own effect.
# Measured with 24 emulated fp32 implementations (float32 math, every activation/gradient
# operand perturbed by an independent +-1 ulp; weights exact, as in moet) against the float64
# goldens, normalised L2 ||a-b||/||b|| (FP8 recipes / bf16):
#   logits  median 5e-8 / 3e-5, max 1.5e-3 / 9.6e-4   (recipe effect vs fp32: 3.5e-2 / 1.7e-2)
#   all gradients concatenated  max 1.4e-2 / 1.7e-3   (recipe effect: 6.1e-2 / 2.5e-2)
#   single gradient tensor      max 4.6e-2 / 4.5e-3   (recipe effect: 6e-3..0.69 / 3e-3..0.46)
#   losses relative max 4e-6; routing identical in every run (golden min margin 1.8e-5).
# Recommended: losses rel <= 1e-5; logits <= 3e-3; all gradients concatenated <= 3e-2 (FP8) and
# <= 5e-3 (bf16); each gradient tensor <= 0.1 (FP8) and <= 1e-2 (bf16) as a gross bound; equal
# expert loads.  That is 2-3x above the worst noise and 6-12x (logits), 2x (FP8 gradients), 5x
# (bf16 gradients) below the recipes' own effect.  The backward cascades make a tighter
# model-level gradient bound impossible (dropping the wgrad quantization altogether moves FP8
# gradients by only ~1.2e-2), so exact operand placement is for op-level tests (test_quantize,
# quant_check.py); this test catches the policy (formats per layer, head, dispatch, combine).
"""Low-precision GEMM recipes of docs/precision.md for the PyTorch reference (torch 1.13).

Formats ("fp32", "bf16", "mxfp8", "fp8-blockwise"); every quantizer works on float32 tensors
exactly as the spec says (fp32 products, fp32 division) and returns float32 values:
- bf16: round to nearest even (NaN stays NaN), by integer arithmetic on the fp32 bits.
- E4M3 ("E4M3FN"): 3 mantissa bits, exponents 2^-6 .. 2^8, subnormal spacing 2^-9, largest
  448; round to nearest even, saturating (finite overflow and +-Inf -> +-448), NaN -> NaN.
- mxfp8: blocks of 32, E8M0 exponent e = amax * fp32(1/448) rounded up to a power of two
  (Transformer Engine's float_to_e8m0 rules), elements times 2^(127-e) (1 for e == 0), cast to
  E4M3, value = element * 2^(e-127) (2^-127 for e == 0).
- fp8-blockwise: blocks of 128 (1x128 / 128x1 for activations and gradients, 128x128 for
  weights), s = fp32(448 / amax) (FLT_MAX on overflow; 1 for an amax of 0, Inf or NaN) rounded
  down to a power of two, value = e4m3(x * s) * fp32(1 / s).
- Blocks tile a dimension from index 0; a last partial block is zero padding (amax ignores NaN).

- nvfp4 / mxfp4 (the 4-bit recipes, FP4 section below): E2M1 elements; NVFP4 with an E4M3 scale
  per 16 and a global scale per tensor, MXFP4 with an E8M0 scale per 32; stochastic rounding of
  the gradients and (NVFP4) the 16-point Hadamard transform on the wgrad operands.

Model math may be float64: `qop` quantizes the float32 rounding of an operand and hands the
quantized values back in the operand's dtype, and `quantized_linear` multiplies those in that
dtype (the golden files are float64 math on quantized operands).
"""

import torch

FORMATS = ("fp32", "bf16", "mxfp8", "fp8-blockwise", "nvfp4", "mxfp4")
PRECISIONS = FORMATS            # the recipes (--precision) carry the same names
BLOCK = {"mxfp8": 32, "fp8-blockwise": 128}
FP4 = ("nvfp4", "mxfp4")
E4M3_MAX = 448.0
FLT_MAX = 3.4028234663852886e38

_U32 = 0xFFFFFFFF


# ------------------------------------------------------------------------------------------
# fp32 bit helpers
# ------------------------------------------------------------------------------------------
def f32_bits(x: torch.Tensor) -> torch.Tensor:
    """Unsigned bit pattern of a float32 tensor, as int64 (for inspection and checks)."""
    assert x.dtype == torch.float32
    return x.contiguous().view(torch.int32).to(torch.int64) & _U32


def f32_from_bits(u: torch.Tensor) -> torch.Tensor:
    """float32 tensor with the (unsigned, int64-held) bit patterns u."""
    u = u.to(torch.int64) & _U32
    return torch.where(u >= 2**31, u - 2**32, u).to(torch.int32).view(torch.float32)


def _from_pos_bits(u: torch.Tensor) -> torch.Tensor:
    """float32 with bit patterns u (int32, sign bit clear)."""
    return u.to(torch.int32).contiguous().view(torch.float32)


def pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k as float32 for integer k in [-126, 127] (built from the exponent bits)."""
    return _from_pos_bits((k.to(torch.int32) + 127) << 23)


# ------------------------------------------------------------------------------------------
# Element formats
# ------------------------------------------------------------------------------------------
def bf16_round(x: torch.Tensor) -> torch.Tensor:
    """float32 -> nearest bf16 value (ties to even) as float32; NaN stays NaN.

    On the int32 view: add 0x7FFF plus the lowest kept bit, clear the low 16 bits (two's
    complement wrap-around gives the unsigned result for negative patterns too)."""
    u = x.contiguous().view(torch.int32)
    r = (u + (0x7FFF + ((u >> 16) & 1))) & -65536
    return torch.where(torch.isnan(x), x, r.view(torch.float32))


def e4m3_round(y: torch.Tensor) -> torch.Tensor:
    """float32 -> nearest E4M3FN value (ties to even), saturated to +-448, as float32.

    For |y| in [2^k, 2^(k+1)) with k >= -6 the spacing is 2^(k-3); below 2^-6 it is 2^-9
    (subnormals).  |y| / spacing is exact in fp32 and torch.round rounds half to even; the
    rounded multiple of the spacing is the E4M3 value (a carry into the next binade included).
    Beyond 448 (and +-Inf) saturate; NaN stays NaN."""
    a = y.abs()
    k = (a.view(torch.int32) >> 23).clamp(min=127 - 6, max=254) - 127   # binade, >= -6
    q = torch.round(a * _from_pos_bits((130 - k) << 23)) * _from_pos_bits((124 + k) << 23)
    q = torch.where(q > E4M3_MAX, torch.full_like(q, E4M3_MAX), q)       # NaN passes
    return torch.copysign(q, y)


def e4m3_decode(code: int) -> float:
    """Value of an E4M3FN code 0..255 (independent table for the self-check)."""
    s = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 0xF and m == 7:
        return float("nan")
    if e == 0:
        return s * m * 2.0 ** -9
    return s * (1 + m / 8) * 2.0 ** (e - 7)


# ------------------------------------------------------------------------------------------
# Block scales
# ------------------------------------------------------------------------------------------
_RCP448 = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(E4M3_MAX, dtype=torch.float32)


def mxfp8_scale(amax: torch.Tensor):
    """amax (float32, >= 0 or NaN/Inf) -> (e8m0 int32, mult f32, deq f32) per block.

    e = float_to_e8m0(amax * fp32(1/448)): the biased exponent E of v, plus one if any mantissa
    bit m is set, except E == 254 and subnormals v <= 2^-127 (E == 0, m <= 0x400000); v == 0
    -> 0, +Inf -> 254, NaN -> 255.  mult = 2^(127-e) (1 for e == 0, +0 for e == 254);
    deq = 2^(e-127) (2^-127 for e == 0, NaN for e == 255)."""
    v = amax * _RCP448                          # fp32 multiply by fp32(1/448)
    u = v.contiguous().view(torch.int32)        # v >= 0 or NaN: sign bit clear
    E, m = u >> 23, u & 0x7FFFFF
    up = (m > 0) & (E != 254) & ~((E == 0) & (m <= 0x400000))
    e = E + up.to(torch.int32)
    e = torch.where(E == 255, torch.where(m == 0, 254, 255), e)
    mult = torch.where(e == 0, 1.0, _from_pos_bits((254 - e).clamp(min=0) << 23))
    deq_bits = torch.where(e == 0, 0x400000, torch.where(e == 255, 0x7FC00000, e << 23))
    return e, mult, _from_pos_bits(deq_bits)


def fp8block_scale(amax: torch.Tensor):
    """amax (float32) -> (deq as stored f32, mult f32, deq f32) per block.

    s = fp32(448 / amax), FLT_MAX if that overflows, rounded down to a power of two (exponent
    bits kept); 1 for an amax of 0, Inf or NaN.  mult = s, deq = fp32(1 / s)."""
    s = torch.tensor(E4M3_MAX, dtype=torch.float32) / amax      # fp32 division
    s = torch.where(torch.isinf(s), torch.full_like(s, FLT_MAX), s)
    s = _from_pos_bits(s.contiguous().view(torch.int32) & 0x7F800000)   # s > 0: 2^floor(log2)
    special = (amax == 0) | torch.isinf(amax) | torch.isnan(amax)
    s = torch.where(special, torch.ones_like(s), s)
    deq = torch.tensor(1.0, dtype=torch.float32) / s
    return deq, s, deq


def _blocked(x: torch.Tensor, b: int, axis: str) -> torch.Tensor:
    """Zero-padded view of a 2-D tensor with the block elements on their own dims:
    rows [R, nb, b], cols [nb, b, C], square [nbr, b, nbc, b]."""
    R, C = x.shape
    pr = (-R) % b if axis in ("cols", "square") else 0
    pc = (-C) % b if axis in ("rows", "square") else 0
    if pr or pc:
        x = torch.nn.functional.pad(x, (0, pc, 0, pr))
    Rp, Cp = R + pr, C + pc
    if axis == "rows":
        return x.reshape(Rp, Cp // b, b)
    if axis == "cols":
        return x.reshape(Rp // b, b, Cp)
    if axis == "square":
        return x.reshape(Rp // b, b, Cp // b, b)
    raise ValueError(f"axis {axis!r}")


_BLOCK_DIMS = {"rows": (2,), "cols": (1,), "square": (1, 3)}


def block_amax(x: torch.Tensor, b: int, axis: str) -> torch.Tensor:
    """Per-block max |x| (NaN ignored, zero padding) over the block grid of a 2-D tensor:
    rows [R, ceil(C/b)], cols [ceil(R/b), C], square [ceil(R/b), ceil(C/b)]."""
    a = torch.nan_to_num(_blocked(x, b, axis).abs(), nan=0.0, posinf=float("inf"))
    return a.amax(dim=_BLOCK_DIMS[axis])


def quantize_blocks(x: torch.Tensor, fmt: str, axis: str):
    """FP8 block quantization of a 2-D float32 tensor -> (values f32 [R, C], scales as stored
    [block grid], mult [block grid], deq [block grid])."""
    b = BLOCK[fmt]
    if fmt == "mxfp8" and axis == "square":
        raise ValueError("MXFP8 blocks are one-dimensional (1x32 or 32x1), not square")
    R, C = x.shape
    p = _blocked(x, b, axis)
    amax = torch.nan_to_num(p.abs(), nan=0.0, posinf=float("inf")).amax(dim=_BLOCK_DIMS[axis])
    scale, mult, deq = (mxfp8_scale if fmt == "mxfp8" else fp8block_scale)(amax)
    me, de = mult, deq
    for d in _BLOCK_DIMS[axis]:                 # broadcast the grid over the block elements
        me, de = me.unsqueeze(d), de.unsqueeze(d)
    v = e4m3_round(p * me) * de                 # fp32 multiplies
    v = v.reshape(R, -1) if axis == "rows" else v.reshape(p.shape[0] * p.shape[1], -1)
    return v[:R, :C], scale, mult, deq


# ------------------------------------------------------------------------------------------
# The 4-bit formats (docs/precision.md, "NVFP4 and MXFP4"; the rules as reference/fp4_check.py
# states them from Transformer Engine's reference quantizer), in float32:
# - NVFP4: tensor amax a (after the transform, if any); g = fp32(2688 / a) (FLT_MAX on overflow;
#   1 when a is 0 or g is 0), g_dec = fp32(1 / g); per block (1x16, 16x1 or 16x16, zero-padded)
#   dec = e4m3(min(block_amax * fp32(g * fp32(1/6)), FLT_MAX) clipped to 448), enc =
#   min(fp32(1 / fp32(dec * g_dec)), FLT_MAX); element e2m1(clip(x * enc, +-6)); the operand's
#   value is e2m1 * dec * g_dec (moet multiplies the two g_dec into the GEMM's fp32 sum).
# - MXFP4: per block of 32, dec = 2^ceil(log2(fp32(block_amax / 6))) (exponent in [-127, 127]),
#   element e2m1(clip(x / dec, +-6)), value e2m1 * dec.
# - Rounding: nearest-even, or stochastic (gradients): up with probability equal to the distance
#   from the lower grid point over the spacing.  The draws here come from torch's generator
#   (`fp4_generator`), not moet's counter-based Philox streams: a stochastic operand agrees with
#   moet's in distribution, not bit for bit (the golden bounds are measured for that).
# - Transform (NVFP4 wgrad operands): along the tokens, each 16 consecutive rows x (zero padding
#   to a multiple of 16) become x . diag(s) . H16 / 4 in fp32 butterflies, s = TE's sign vector
#   (moet's default, the sign vector of a model not stepped by the trainer) or a random one.
# ------------------------------------------------------------------------------------------
TE_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)
_fp4_gen = {"gen": torch.Generator().manual_seed(0), "signs": TE_SIGNS}


def fp4_generator(seed: int, random_signs: bool = False):
    """Reseed the generator of the stochastic roundings (make_golden: the spec's seed); with
    random_signs the transform's sign vector is drawn from it too (16 fair +-1), as moet draws
    one per (seed, step), else it is TE's."""
    g = torch.Generator().manual_seed(int(seed))
    _fp4_gen["gen"] = g
    _fp4_gen["signs"] = (tuple(int(v) for v in torch.randint(0, 2, (16,), generator=g) * -2 + 1)
                         if random_signs else TE_SIGNS)


def e2m1_round(y: torch.Tensor, stochastic: bool = False) -> torch.Tensor:
    """float32 -> E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives), saturating to +-6;
    nearest-even or stochastic.  NaN -> +6 (cvt satfinite)."""
    a = torch.where(torch.isnan(y), torch.full_like(y, 6.0), y.abs()).clamp(max=6.0)
    sp = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a),
                                                                  torch.full_like(a, 2.0)))
    t = a / sp                                       # exact: sp is a power of two
    if stochastic:
        lo = torch.floor(t)
        u = torch.rand(t.shape, generator=_fp4_gen["gen"], dtype=torch.float64)
        q = lo + (u < (t - lo).double()).to(t.dtype)
    else:
        q = torch.round(t)                           # half to even
    q = (q * sp).clamp(max=6.0)
    return torch.copysign(q, torch.where(torch.isnan(y), torch.ones_like(y), y))


def hadamard16_rows(x: torch.Tensor) -> torch.Tensor:
    """x [R, C] (R % 16 == 0): each 16 consecutive rows mixed, x . diag(s) . H16 / 4 along the
    rows, in fp32 butterflies (moet's order)."""
    R, C = x.shape
    signs = torch.tensor(_fp4_gen["signs"], dtype=x.dtype)
    v = (x.reshape(R // 16, 16, C) * signs[:, None]).clone()
    for h in (1, 2, 4, 8):
        idx = torch.tensor([i for i in range(16) if not i & h])
        a, b = v[:, idx, :].clone(), v[:, idx + h, :].clone()
        v[:, idx, :], v[:, idx + h, :] = a + b, a - b
    return (v * 0.25).reshape(R, C)


def fp4_quantize(x: torch.Tensor, fmt: str, axis: str, stochastic: bool = False):
    """x float32 [R, C] -> (values e2m1 * dec float32 [R, C], g_dec float32 scalar; 1 for MXFP4)."""
    b = 16 if fmt == "nvfp4" else 32
    if fmt == "mxfp4" and axis == "square":
        raise ValueError("MXFP4 blocks are 1x32 or 32x1")
    R, C = x.shape
    bam = block_amax(x, b, axis)
    one = torch.tensor(1.0, dtype=torch.float32)
    if fmt == "nvfp4":
        amax = (torch.nan_to_num(x.abs(), nan=0.0, posinf=float("inf")).max() if x.numel()
                else one * 0)
        g = torch.tensor(2688.0, dtype=torch.float32) / amax
        g = torch.where(torch.isinf(g), torch.tensor(FLT_MAX, dtype=torch.float32), g)
        g = torch.where((amax == 0) | (g == 0), one, g)
        g_dec = one / g
        sc = torch.minimum(bam * (g * (one / 6)), torch.tensor(FLT_MAX, dtype=torch.float32))
        dec = e4m3_round(sc.clamp(0, E4M3_MAX))
        enc = torch.minimum(one / (dec * g_dec), torch.tensor(FLT_MAX, dtype=torch.float32))
    else:
        v = bam / torch.tensor(6.0, dtype=torch.float32)
        m, e = torch.frexp(v)
        e = torch.where(m == 0.5, e - 1, e)
        e = torch.where(v == 0, torch.full_like(e, -127), torch.where(torch.isinf(v), torch.full_like(e, 127), e))
        e = e.clamp(-127, 127)
        dec = (2.0 ** e.to(torch.float64)).to(torch.float32)
        enc, g_dec = one / dec, one
    p = _blocked(x, b, axis)
    de, en = dec, enc
    for d in _BLOCK_DIMS[axis]:
        de, en = de.unsqueeze(d), en.unsqueeze(d)
    vals = e2m1_round(p * en, stochastic) * de
    vals = vals.reshape(R, -1) if axis == "rows" else vals.reshape(p.shape[0] * p.shape[1], -1)
    return vals[:R, :C], g_dec


def fp4_op(t: torch.Tensor, fmt: str, axis: str, stochastic: bool = False) -> torch.Tensor:
    """The dequantized FP4 operand of t (quantized from its float32 rounding), in t's dtype:
    values times g_dec, the product in t's dtype."""
    v, g_dec = fp4_quantize(t.detach().to(torch.float32).contiguous(), fmt, axis, stochastic)
    return v.to(t.dtype) * g_dec.to(t.dtype)


def fp4_wgrad_op(t: torch.Tensor, fmt: str, stochastic: bool) -> torch.Tensor:
    """A wgrad operand [r, C]: zero rows up to a multiple of 16, NVFP4 transformed along the
    tokens, then 16x1 (32x1) blocks along the tokens."""
    x = t.detach().to(torch.float32).contiguous()
    pad = (-x.shape[0]) % 16
    if pad:
        x = torch.nn.functional.pad(x, (0, 0, 0, pad))
    if fmt == "nvfp4":
        x = hadamard16_rows(x)
    v, g_dec = fp4_quantize(x, fmt, "cols", stochastic)
    return v.to(t.dtype) * g_dec.to(t.dtype)


def quantize(x: torch.Tensor, fmt: str, axis: str = "rows") -> torch.Tensor:
    """Quantized values (float32) of a float32 tensor in `fmt`; FP8 formats need 2-D x
    (axis "rows": 1 x b blocks, "cols": b x 1, "square": b x b).  fp32 is the identity."""
    assert x.dtype == torch.float32, x.dtype
    if fmt == "fp32":
        return x
    if fmt == "bf16":
        return bf16_round(x)
    if fmt in FP4:
        v, g_dec = fp4_quantize(x, fmt, axis)
        return v * g_dec
    if fmt not in BLOCK:
        raise ValueError(f"format {fmt!r} is not one of {FORMATS}")
    assert x.dim() == 2, x.shape
    return quantize_blocks(x, fmt, axis)[0]


def weight_axis(fmt: str, dgrad: bool) -> str:
    """Blocks of a weight [O, D]: MXFP8 1x32 along D for fprop, 32x1 along O for dgrad;
    blockwise 128x128 for both."""
    if fmt == "fp8-blockwise":
        return "square"
    return "cols" if dgrad else "rows"


def fp4_weight_axis(fmt: str, dgrad: bool) -> str:
    """Blocks of a weight [O, D]: NVFP4 16x16 (one copy for fprop and dgrad); MXFP4 1x32 along
    D for fprop, 32x1 along O for dgrad."""
    if fmt == "nvfp4":
        return "square"
    return "cols" if dgrad else "rows"


def qop(t: torch.Tensor, fmt: str, axis: str = "rows") -> torch.Tensor:
    """Operand `t` (any float dtype) quantized from its float32 rounding, back in t's dtype.
    fp32 leaves t untouched (no float32 rounding of a float64 operand)."""
    if fmt == "fp32":
        return t
    return quantize(t.detach().to(torch.float32).contiguous(), fmt, axis).to(t.dtype)


# ------------------------------------------------------------------------------------------
# Autograd: the quantized linear layer and the straight-through quantizer
# ------------------------------------------------------------------------------------------
class QuantizedLinear(torch.autograd.Function):
    """y = x·Wᵀ with each GEMM on its own quantized operands (docs/precision.md):
    fprop  y  = Q_rows(x)·Q_w(W)ᵀ         (x already quantized when x_in_format: used as is)
    dgrad  dx = Q_rows(dy)·Q_wd(W)
    wgrad  dW = Q_cols(dy)ᵀ·Q_cols(x)     (b x 1 blocks from row 0 of this call's rows)
    Gradients go to the unquantized (master) x and W; products in x's dtype."""

    @staticmethod
    def forward(ctx, x, w, fmt, x_in_format):
        O, D = w.shape
        x2 = x.reshape(-1, D)
        if fmt in FP4:       # the 4-bit operands (fp4_linear_forward): x rows, nearest-even
            xq = x2 if x_in_format else fp4_op(x2, fmt, "rows")
            y = xq.matmul(fp4_op(w, fmt, fp4_weight_axis(fmt, False)).t())
        else:
            xq = x2 if x_in_format else qop(x2, fmt, "rows")
            y = xq.matmul(qop(w, fmt, weight_axis(fmt, False)).t())
        ctx.save_for_backward(x2, w)
        ctx.fmt, ctx.x_shape = fmt, x.shape
        return y.reshape(*x.shape[:-1], O)

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        fmt = ctx.fmt
        dy2 = dy.reshape(-1, w.shape[0])
        dx = dw = None
        if fmt in FP4:       # dy stochastic; wgrad operands padded and (NVFP4) transformed
            if ctx.needs_input_grad[0]:
                dx = fp4_op(dy2, fmt, "rows", True).matmul(
                    fp4_op(w, fmt, fp4_weight_axis(fmt, True))).reshape(ctx.x_shape)
            if ctx.needs_input_grad[1]:
                dw = fp4_wgrad_op(dy2, fmt, True).t().matmul(fp4_wgrad_op(x2, fmt, False))
            return dx, dw, None, None
        if ctx.needs_input_grad[0]:
            dx = qop(dy2, fmt, "rows").matmul(qop(w, fmt, weight_axis(fmt, True)))
            dx = dx.reshape(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            dw = qop(dy2, fmt, "cols").t().matmul(qop(x2, fmt, "cols"))
        return dx, dw, None, None


def quantized_linear(x, w, fmt: str, x_in_format: bool = False):
    """x [..., D] · w[O, D]ᵀ in format `fmt` (fp32: plain F.linear)."""
    if fmt == "fp32":
        return torch.nn.functional.linear(x, w)
    return QuantizedLinear.apply(x, w, fmt, x_in_format)


class QuantizeSTE(torch.autograd.Function):
    """Forward: the quantized values (1 x b row blocks for FP8, rounding for bf16);
    backward: the gradient passes unchanged (straight-through)."""

    @staticmethod
    def forward(ctx, x, fmt, axis):
        shape = x.shape
        return qop(x.reshape(-1, shape[-1]), fmt, axis).reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return g, None, None


def quantize_ste(x, fmt: str, axis: str = "rows"):
    return x if fmt == "fp32" else QuantizeSTE.apply(x, fmt, axis)


class Bf16Attention(torch.autograd.Function):
    """Causal attention whose two products take bf16 operands (moet's attention under the bf16
    and FP8 recipes).  Forward: S = r(q)·r(k)ᵀ·scale, P = softmax(S), O = r(P)·r(v); backward:
    dV = r(P)ᵀ·r(dO), dP = r(dO)·r(v)ᵀ, dS = P∘(dP − rowsum(r(dO)∘O)), dQ = r(dS)·r(k)·scale,
    dK = r(dS)ᵀ·r(q)·scale, with r = bf16 rounding (of the float32 value).  moet rounds each key
    tile's unnormalised probabilities in forward (flash attention); rounding is relative, so the
    two differ by bf16 rounding noise there.  q, k: [B, H, T, K]; v: [B, H, T, U]."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        T = q.shape[-2]
        qb, kb, vb = qop(q, "bf16"), qop(k, "bf16"), qop(v, "bf16")
        s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        p = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
        o = torch.matmul(qop(p, "bf16"), vb)
        ctx.save_for_backward(qb, kb, vb, p, o)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        qb, kb, vb, p, o = ctx.saved_tensors
        dob = qop(do, "bf16")
        dv = torch.matmul(qop(p, "bf16").transpose(-1, -2), dob)
        dp = torch.matmul(dob, vb.transpose(-1, -2))
        ds = p * (dp - (dob * o).sum(-1, keepdim=True))
        dsb = qop(ds, "bf16")
        dq = torch.matmul(dsb, kb) * ctx.scale
        dk = torch.matmul(dsb.transpose(-1, -2), qb) * ctx.scale
        return dq, dk, dv, None


def grouped_quantized_linear(x_MD, counts, weights, fmt: str, x_in_format: bool = False):
    """The experts' grouped linear (single process): rows x_MD sorted by expert, `counts[e]`
    rows for expert e, weights[e] [O, D].  One quantized linear per non-empty segment, so each
    expert's wgrad blocks along tokens start at its first row.  Returns [M, O]."""
    outs = [quantized_linear(xe, w, fmt, x_in_format)
            for xe, w, n in zip(x_MD.split(list(counts)), weights, counts) if n > 0]
    return torch.cat(outs, 0)


# ------------------------------------------------------------------------------------------
# The recipes' policy (src/model/recipe.h's kRecipes: the contract)
# ------------------------------------------------------------------------------------------
def decoder_format(precision: str, layer: int, num_layers: int, bf16_layers: int = 1,
                   bf16_layers_end: int = -1) -> str:
    """Format of the linears of decoder layer `layer` (>= num_layers: an MTP block); the first
    bf16_layers and the last bf16_layers_end (negative: bf16_layers) main layers run bf16."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
    if precision in ("fp32", "bf16"):
        return precision
    main = layer < num_layers
    end = bf16_layers if bf16_layers_end < 0 else bf16_layers_end
    if main and (layer < bf16_layers or layer >= num_layers - end):
        return "bf16"
    return precision


def dispatch_format(fmt: str) -> str:
    """The format the MoE layer hands its tokens to the dispatch in: the experts' fprop format,
    but bf16 under the 4-bit recipes, whose dispatch quantizes each expert's rows (from one
    source) on their own, NVFP4 under that segment's amax (model.py's MoE)."""
    return "bf16" if fmt in FP4 else fmt


def head_format(precision: str) -> str:
    """LM head and MTP eh_proj: bf16 unless fp32."""
    return "fp32" if precision == "fp32" else "bf16"


def attention_format(precision: str) -> str:
    """Core attention's products: bf16 operands unless fp32 (PrecisionPolicy::attention)."""
    return "fp32" if precision == "fp32" else "bf16"


def combine_format(precision: str) -> str:
    """Experts' outputs before the gate-weighted combine: bf16 unless fp32."""
    return "fp32" if precision == "fp32" else "bf16"
