// ops.h — the backend-neutral op interface. Every layer of the model computes through these
// functions; the CPU implementation lives in kernels/cpu/ (a CUDA one will sit beside it).
//
// Conventions (all ops):
// - Tensors are row-major, contiguous views (core/tensor.h); the shape suffix of a name says
//   its shape (letters in docs/model.md). Shapes are checked (MOET_CHECK) before any parallel
//   region.
// - Floating tensors are F32 (training) or F64 (finite-difference tests); all floating
//   arguments of one call share the dtype. Index tensors are I32.
// - Outputs are overwritten unless an argument or option says it accumulates ("+="); parameter
//   gradients always accumulate (gradient accumulation, shared weights).
// - An empty Tensor (ptr == nullptr) for an optional output means "don't compute it".
// - Results are deterministic for a fixed thread count: no atomics, reductions in a fixed
//   order. With set_thread_invariant(true) (--deterministic) they do not depend on the thread
//   count either: every GEMM is cut into output tiles fixed by its shape alone, each multiplied
//   whole along K on one thread (docs/parallel.md, "--deterministic").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/number_format.h"

namespace moet::ops {

// Threads used by the ops (OpenMP and the BLAS library).
void set_num_threads(int n);
int num_threads();
// Results that do not depend on the thread count (the GEMMs' only thread-dependent choice is how
// their libraries split the work: see blas.cpp). Off by default (the libraries' own threading is
// faster); --deterministic turns it on.
void set_thread_invariant(bool on);
bool thread_invariant();

// ---------------------------------------------------------------- CPU capabilities
// Whether this CPU multiplies bf16 in hardware (AVX512_BF16 or AMX, as oneDNN sees it).
bool cpu_has_bf16();
// The dtype low-precision GEMM operands are stored in and multiplied as: BF16 through bf16 GEMMs,
// or F32 through sgemm (bf16 and FP8 values are exact in either, the products exact and summed in
// fp32 both ways: docs/precision.md). By default BF16 where the CPU multiplies bf16, F32
// elsewhere; a command sets it from measured speeds (measure/gemm_choice.h) before it builds a
// model, with the reason its header prints. MOET_NO_BF16_GEMM=1 and MOET_BF16_OPERANDS=1 (tests)
// override both.
DType gemm_operand_dtype();
void set_gemm_operand_dtype(DType dtype, const std::string& reason);
// Why the operands are stored as they are ("bf16 GEMMs 0.17 TFLOP/s < fp32 0.33 here", "no bf16
// instructions", ...).
const std::string& gemm_operand_reason();
// Whether MOET_NO_BF16_GEMM or MOET_BF16_OPERANDS fixes the store (a measurement must not).
bool gemm_operand_dtype_forced();
// One line for people: the instruction set and the GEMM kernels in use for `fmt`.
// `with_reason`: and why the operands are stored so (gemm_operand_reason()).
std::string kernel_description(Format fmt, bool with_reason = true);

// ---------------------------------------------------------------- elementwise / reductions
void copy(const Tensor& src, Tensor& dst);  // dst = src (same numel; F32 <-> BF16 converts)
void fill(Tensor& x, double value);         // x = value
void add(const Tensor& a, const Tensor& b, Tensor& out);       // out = a + b (out may alias)
void add_inplace(Tensor& acc, const Tensor& x, double alpha);  // acc += alpha * x
void scale_inplace(Tensor& x, double alpha);                   // x *= alpha
double sum_squares(const Tensor& x);                           // Σ x², fixed-order

// ---------------------------------------------------------------- operands written by producers
// An activation's GEMM operands in a low-precision format, written by the op that produces the
// activation while its rows are still in cache, so no GEMM quantizes it in a pass of its own
// (docs/kernels.md, "Operands"):
// - rows: the values in `fmt` with 1×b blocks along each row — what fprop (x) and dgrad (dy) read;
// - cols: the values with b×1 blocks down each column (FP8 formats only: what wgrad reads of x
//   and dy), the blocks starting at row 0, or at each segment's first row when `segments` (I32
//   offsets, G+1 entries, as the grouped GEMMs take them) is set.
// rows and cols have the activation's shape, in gemm_operand_dtype() (rows may also be F32 where
// a consumer wants fp32 values, and may be the activation's own memory when its fp32 values are
// not needed: the producer then rounds in place). An empty tensor is not written. In
// element-wise formats (bf16) `rows` serves every GEMM. An empty Operand asks for nothing.
struct Operand {
  Format fmt = Format::F32;
  Tensor rows, cols;
  Tensor segments;
  bool empty() const { return rows.empty() && cols.empty(); }
  // What a wgrad GEMM reads: cols in FP8 formats, rows in element-wise ones.
  const Tensor& wgrad() const { return is_fp8(fmt) ? cols : rows; }
  // Rows [r0, r1) (element-wise formats, or no cols: cols blocks do not split).
  Operand row_range(int64_t r0, int64_t r1) const;
};
// Writes q's tensors from x in one pass over x: the quantize-and-transpose of a GPU stack, for an
// activation whose producer could not write them (kernels/cpu/emit.h does the same inside
// producers).
void quantize_operand(const Tensor& x_RC, const Operand& q);

// ---------------------------------------------------------------- matrix products (BLAS)
// c = alpha * op(a) · op(b) + beta * c, 2-D tensors, op = transpose when the flag is set.
// a and b may be BF16 (both) with c F32: products exact, accumulation in fp32.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
          double alpha = 1.0, double beta = 0.0);
// A weight's operands for low-precision GEMMs (number_format.h), made once per parameter update
// and reused by every GEMM until the weights change: fprop's copy has its blocks along the input
// dim D, dgrad's along the output dim O (FP8Block weights: 128×128 squares, which serve both).
// Tensors in gemm_operand_dtype() of the weight's shape; for [E, O, D] expert weights each
// expert's matrix is blocked on its own. An F32 role needs no copy (the weight itself is used).
struct WeightOperands {
  Tensor fprop, dgrad;
  // FP4 formats: each expert's (or the matrix's) amax, from which NVFP4's global scale comes
  // (written by prepare_weight), and the weight's identity in the stochastic-rounding keys of
  // its layer's gradients (the parameter's name hashed; set by the parameter store).
  std::vector<float> amax;
  uint64_t key = 0;
};
// Whether dgrad needs a copy of its own (MXFP8 and MXFP4 blocks differ by direction; bf16
// rounding and 128×128 or 16×16 squares do not).
bool weight_dgrad_separate(const LinearPrecision& p);
// Fills wq (memory given by the caller) from w_EOD (F32, [O, D] or [E, O, D]).
void prepare_weight(const Tensor& w_EOD, const LinearPrecision& p, WeightOperands& wq);

// What a linear op is asked for beyond its tensors (linear_forward, linear_backward).
struct LinearOptions {
  LinearPrecision precision = {};      // the format of each GEMM (fprop, dgrad, wgrad)
  const WeightOperands* wq = nullptr;  // w's prepared operands (null: w quantized on the fly)
  // Operands made by the producers of x and dy (null or empty: quantized here). fprop reads
  // xq->rows, dgrad dyq->rows, wgrad dyq->wgrad() and xq->wgrad().
  const Operand* xq = nullptr;
  const Operand* dyq = nullptr;
  bool accumulate = false;  // the op's output (forward: y; backward: dx) += instead of =
};

// y_NO = x_ND · w_ODᵀ (Hugging Face weight layout [out, in]), or y += with o.accumulate. With a
// low-precision fprop, x is quantized along D (1×b blocks) and w comes from o.wq (or is quantized
// on the fly); fp32 accumulation.
void linear_forward(const Tensor& x_ND, const Tensor& w_OD, Tensor& y_NO,
                    const LinearOptions& o = {});
// dx_ND = dy_NO · w_OD (+= with o.accumulate; skipped when dx is empty); dw_OD += dy_NOᵀ · x_ND
// (skipped when dw is empty). Low precision: dgrad quantizes dy along O (1×b); wgrad quantizes dy
// and x along N (b×1).
void linear_backward(const Tensor& dy_NO, const Tensor& x_ND, const Tensor& w_OD, Tensor& dx_ND,
                     Tensor& dw_OD, const LinearOptions& o = {});

// What a grouped linear op is asked for beyond its tensors (grouped_linear_forward,
// grouped_linear_backward). precision, wq, xq and dyq as in LinearOptions (the cols blocks of xq
// and dyq restart at each segment's first row).
struct GroupedLinearOptions {
  int64_t segments_per_expert = 1;  // S
  LinearPrecision precision = {};
  const WeightOperands* wq = nullptr;
  const Operand* xq = nullptr;
  const Operand* dyq = nullptr;
  // Forward: x already holds precision.fprop's values (quantized along D before the dispatch;
  // F32, or BF16 bits), so it is used as it is.
  bool x_in_format = false;
  // FP4: x holds each segment's fprop values as the dispatch quantized them
  // (quantize_fp4_segments), with these amaxes (G entries): forward multiplies them as they are,
  // and the wgrad operand of x is made from them dequantized (× nvfp4_global_decode(amax)).
  const float* x_fp4_amax = nullptr;
  // Forward: BF16 rounds each segment's output to bf16 as its GEMM ends (the epilogue of the
  // experts' down projection, whose outputs travel back in bf16).
  Format y_format = Format::F32;
};

// Grouped GEMM over experts. Rows are in E*S segments, S per expert (expert-major; under expert
// parallelism segment s of an expert holds the rows from source rank s); rows
// [offsets[g], offsets[g+1]) form segment g of expert g / S (offsets_E1 is I32 with E*S+1
// entries); w_EOD holds the experts' [O, D] weights back to back.
// y[rows of g] = x[rows of g] · w[g / S]ᵀ, one GEMM per non-empty segment. Precision as
// linear_forward; xq (used instead of x) as in linear_forward.
void grouped_linear_forward(const Tensor& x_MD, const Tensor& offsets_E1, const Tensor& w_EOD,
                            Tensor& y_MO, const GroupedLinearOptions& o = {});
// dx = dy · w[e] per segment (overwrite); dw[e] += Σ_s dy[rows of s]ᵀ · x[rows of s], the S
// segment gradients summed in the canonical tree order (core/tree_sum.h).
// A 4-D dw [S, E, O, D] keeps them apart instead: dw[s, e] += dy[rows of segment (e, s)]ᵀ ·
// x[those rows], computed exactly as with one segment per expert.
// Low-precision wgrad blocks run along the rows of each segment, starting at its first row, so
// they hold the same tokens whatever the expert-parallel layout.
// x may be BF16 bits holding precision.wgrad's values (an element-wise format) when xq is not
// given.
void grouped_linear_backward(const Tensor& dy_MO, const Tensor& x_MD, const Tensor& offsets_E1,
                             const Tensor& w_EOD, Tensor& dx_MD, Tensor& dw_EOD,
                             const GroupedLinearOptions& o = {});

// ---------------------------------------------------------------- low precision (number_format.h)
// q = the values of x in `fmt` with its blocks along `axis`: each element quantized to E4M3
// with its block's scale and multiplied back (FP8 formats), or rounded to bf16 (BF16), or
// copied (F32); stored as F32 or BF16, exact in either (docs/precision.md). x is F32; leading
// dimensions fold into rows. Blocks tile each dimension from its start; a last partial block
// quantizes as if the tensor were padded with zeros. BF16 and F32 ignore the axis.
void quantize(const Tensor& x_RC, Format fmt, BlockAxis axis, Tensor& q_RC);
// Scales per tensor: one per block, row-major over the block grid — [R, ⌈C/b⌉] for Rows,
// [⌈R/b⌉, C] for Cols, [⌈R/b⌉, ⌈C/b⌉] for Square.
int64_t scale_count(const Tensor& x_RC, Format fmt, BlockAxis axis);
// The packed form (FP8 formats): codes_RC U8 E4M3 bits; scales U8 E8M0 exponents (MXFP8) or
// F32 dequantisation scales (FP8Block); q_RC (F32) may be empty.
void quantize_packed(const Tensor& x_RC, Format fmt, BlockAxis axis, Tensor& codes_RC,
                     Tensor& scales, Tensor& q_RC);
// q_RC (F32) = the values of a packed tensor.
void dequantize(const Tensor& codes_RC, const Tensor& scales, Format fmt, BlockAxis axis,
                Tensor& q_RC);

// ---------------------------------------------------------------- 4-bit formats (NVFP4, MXFP4)
// The formats and their quantizer (kernels/cpu/fp4_quantize.cpp; docs/precision.md, "NVFP4 and
// MXFP4"). The linear and grouped linear ops take them as any other format (the recipes nvfp4
// and mxfp4: kernels/cpu/fp4_operands.cpp forms their operands); quantize, quantize_packed and
// the operand producers refuse them. NVFP4 follows Transformer Engine's reference quantizer: with
// the tensor's amax (after the transform, if any) g = min(2688/amax, FLT_MAX) (1 if amax is 0 or g
// is 0), g_dec = 1/g; per block dec = e4m3(min(block_amax·(g·fp32(1/6)), FLT_MAX)) (RNE, saturating
// at 448, subnormals kept), enc = min(1/(dec·g_dec), FLT_MAX); element e2m1(x·enc) (RNE, or
// stochastic). MXFP4: per block of 32 the E8M0 scale 2^ceil(log2(fp32(block_amax/6))) (exponent
// clamped to ±127), element e2m1(x·2^-e). Blocks: Rows 1×b, Cols b×1, Square 16×16 (NVFP4 only); a
// partial block is quantized as if zero-padded.

// The training step the FP4 operands of the GEMMs that follow belong to: the seed of their
// stochastic rounding and of the step's random Hadamard sign vector (docs/precision.md,
// "Training in NVFP4"). Set by the trainer before each step's first forward.
void set_fp4_step(uint64_t seed, int64_t step);
// The step's sign vector of the 16-point transform (16 values ±1), drawn from (seed, step).
void fp4_step_signs(uint64_t seed, int64_t step, float signs[16]);

// Transformer Engine's reference sign vector for the 16-point random Hadamard transform.
extern const float kHadamardSignsTE[16];

struct Fp4Options {
  // NVFP4, Rows or Cols: the random Hadamard transform, each 16 consecutive elements x (a row
  // vector) becoming x·diag(s)·H16/4 (H16 Sylvester, s = `signs`, TE's reference vector when
  // null), applied to each 16 consecutive elements along
  // along the blocks' axis before quantizing (the amax is the transformed tensor's). That axis
  // must be a multiple of 16 (the transform mixes a block; a zero-padded one would leave the
  // tensor).
  bool hadamard = false;
  const float* signs = nullptr;
  // Stochastic rounding of the elements (instead of nearest-even): 8 random bits per element
  // (as Blackwell's cvt.rs) from CounterRng(seed, stream), byte i % 16 of block i / 16, where
  // i = (row0 + r)·C + c is the element's position in the logical tensor whose rows [row0,
  // row0 + R) this call holds — so a tensor split over ranks or sequences draws the same numbers.
  bool stochastic = false;
  uint64_t seed = 0, stream = 0;
  int64_t row0 = 0;
  // NVFP4: >= 0 sets the tensor's amax (one defined over more than this call, e.g. the max of
  // fp4_amax over the shards); < 0: this call's.
  float global_amax = -1.0f;
};

// What a quantization writes; an empty tensor is not written.
struct Fp4Outputs {
  Tensor values;  // [R, C] F32 or BF16: element × block decode scale (E4M3 for NVFP4, E8M0 for
                  // MXFP4), exact in both — the GEMM operand (gemm_operand_dtype())
  Tensor codes;   // [R, C] F32: the E2M1 elements as floats
  Tensor scales;  // F32 block decode scales, scale_count entries row-major over the block grid
};

struct Fp4Result {
  float amax = 0;          // NVFP4: the amax its global scale came from (given or measured)
  float global_scale = 1;  // NVFP4: g (1 for MXFP4); values·(1/g) are the dequantized tensor
};

// Quantizes x_RC (F32; leading dimensions fold into rows) to `fmt` (NVFP4 or MXFP4) with blocks
// along `axis`. Deterministic for any thread count.
Fp4Result quantize_fp4(const Tensor& x_RC, Format fmt, BlockAxis axis, const Fp4Outputs& out,
                       const Fp4Options& o = {});
// The amax quantize_fp4 would measure (after the transform when o.hadamard), NaN ignored.
float fp4_amax(const Tensor& x_RC, BlockAxis axis, const Fp4Options& o = {});
// The 16-point transform alone: each 16 consecutive elements x along `axis` (Rows or Cols) become
// x·diag(signs)·H16/4 (fp32: signs, four butterfly stages, then ·1/4); signs null: TE's. y may
// be x (in place).
void hadamard16(const Tensor& x_RC, BlockAxis axis, const float* signs, Tensor& y_RC);
// The factor a GEMM of two NVFP4 operands multiplies its fp32 sum of value products by, from
// their amaxes, as Transformer Engine forms it: fp32(fp32(amax_a·amax_b) / (6·6·448·448)).
float nvfp4_gemm_alpha(float amax_a, float amax_b);
// NVFP4's global decode scale 1/g of a tensor with this amax: its values (e2m1 × block scale)
// times it are the dequantized tensor.
float nvfp4_global_decode(float amax);

// The experts' tokens under the FP4 recipes (the MoE dispatch): each non-empty segment
// [off[g], off[g+1]) of x_MD (F32, or BF16 bits) quantized in place as the experts' fprop operand
// — 1×b blocks along D, nearest-even; NVFP4 under the segment's own amax (amax[g]; 0 under MXFP4
// and for an empty segment). The values (e2m1 × block scale) are exact in both dtypes.
void quantize_fp4_segments(Tensor& x_MD, const int32_t* off, int64_t G, Format fmt, float* amax);

// Rows on the wire (the experts' token exchange): each row of x_RD, which must already hold
// `fmt`'s values along D (quantize with BlockAxis::Rows), packed losslessly into
// wire_row_bytes(D, fmt) bytes — fp32: 4·D; bf16: 2·D; FP8: D E4M3 codes, then the row's ⌈D/b⌉
// scales (E8M0 bytes for MXFP8, fp32 for FP8Block) — and unpacked back to F32 values. FP4:
// encode_fp4_rows quantizes rows of F32 values as quantize_fp4_segments does, for a segment
// whose amax is `amax` (NVFP4), and packs ⌈D/2⌉ bytes of E2M1 codes (two a byte, the even
// element in the low nibble), then the row's ⌈D/b⌉ scale bytes (E4M3 for NVFP4, E8M0 for MXFP4);
// decode_rows unpacks them to the values (e2m1 × block scale). The amax travels apart.
int64_t wire_row_bytes(int64_t D, Format fmt);
void encode_rows(const Tensor& x_RD, Format fmt, void* out);
void encode_fp4_rows(const Tensor& x_RD, Format fmt, float amax, void* out);
void decode_rows(const void* in, Format fmt, Tensor& x_RD);

// ---------------------------------------------------------------- normalisation / activation
// y = x / sqrt(mean(x²) + eps) * w per row; rstd_N = 1/sqrt(mean(x²) + eps) saved for backward.
// Producers of GEMM inputs take an Operand `q` to write as they go (empty: none).
void rmsnorm_forward(const Tensor& x_ND, const Tensor& w_D, double eps, Tensor& y_ND,
                     Tensor& rstd_N, const Operand& yq = {});
// dx (= or += when accumulate_dx), dw_D +=; dxq: the operands of the final dx.
void rmsnorm_backward(const Tensor& dy_ND, const Tensor& x_ND, const Tensor& w_D,
                      const Tensor& rstd_N, Tensor& dx_ND, bool accumulate_dx, Tensor& dw_D,
                      const Operand& dxq = {});

// gu_N2F = [gate | up] (gate in columns [0, F), up in [F, 2F)); h = silu(gate) * up. h may be
// empty when hq is not: only the operands are written (the down projection is h's only reader).
void swiglu_forward(const Tensor& gu_N2F, Tensor& h_NF, const Operand& hq = {});
void swiglu_backward(const Tensor& dh_NF, const Tensor& gu_N2F, Tensor& dgu_N2F,
                     const Operand& dguq = {});

// ---------------------------------------------------------------- embedding and loss
// out[n] = table[tokens[n]]; tokens_N is I32.
void embedding_forward(const Tensor& tokens_N, const Tensor& table_VD, Tensor& out_ND);
// dtable[tokens[n]] += dout[n], in token order.
void embedding_backward(const Tensor& tokens_N, const Tensor& dout_ND, Tensor& dtable_VD);
// Vocabulary-parallel parts (tensor parallelism): table_VD holds rows [first, first + V) of a
// vocabulary of `vocab`. Forward gives a token of another part a row of −0, so adding the parts'
// outputs is exact; backward adds only this part's tokens (in token order).
void embedding_part_forward(const Tensor& tokens_N, const Tensor& table_VD, int64_t first,
                            int64_t vocab, Tensor& out_ND);
void embedding_part_backward(const Tensor& tokens_N, const Tensor& dout_ND, int64_t first,
                             int64_t vocab, Tensor& dtable_VD);

// Returns Σ over rows with targets[n] >= 0 of -log softmax(logits[n])[targets[n]]; rows with a
// negative target are ignored. When dlogits is non-empty it receives
// grad_scale * (softmax - onehot) on valid rows and 0 on ignored rows (dlogits may alias logits).
double cross_entropy(const Tensor& logits_NV, const Tensor& targets_N, double grad_scale,
                     Tensor& dlogits_NV);
// The same in two halves, for an LM head that recomputes its logits in chunks instead of keeping
// them: forward returns the summed loss and saves each row's log-sum-exp; backward turns the
// (recomputed) logits into grad_scale · (softmax − onehot) in place from that log-sum-exp, with
// no second max or sum.
double cross_entropy_forward(const Tensor& logits_NV, const Tensor& targets_N, Tensor& lse_N);
// Both at once, when the gradient is wanted right away (the LM head in training): forward's loss
// sum and lse, then backward's gradient in place (with its operands dq), row by row while the
// row is in cache — the same numbers, one trip of the logits through memory instead of two.
double cross_entropy_fused(Tensor& logits_NV, const Tensor& targets_N, Tensor& lse_N,
                           double grad_scale, const Operand& dq = {});
void cross_entropy_backward(Tensor& logits_NV, const Tensor& targets_N, const Tensor& lse_N,
                            double grad_scale, const Operand& dq = {});
// Vocabulary-parallel cross-entropy (logits_NV, F32: this part's V columns, from column `first`
// of the whole vocabulary). part_sums: per row and each of `pieces` equal pieces of the columns,
// Σ exp(x − max_N[n]) in double into sums_PN[p·N + n] (the caller adds the pieces and the parts
// and takes lse = max + log Σ). part_backward: the gradient in place from the whole vocabulary's
// lse, grad_scale · (softmax − onehot), the onehot where this part holds the target; rows with a
// negative target get 0.
void cross_entropy_part_sums(const Tensor& logits_NV, const Tensor& max_N, int64_t pieces,
                             double* sums_PN);
void cross_entropy_part_backward(Tensor& logits_NV, const Tensor& targets_N, int64_t first,
                                 const Tensor& lse_N, double grad_scale, const Operand& dq = {});

// ---------------------------------------------------------------- attention
// RoPE in place on x viewed [N, H, W]: dims [off, off+R) of every head, interleaved pairs
// (x[2i], x[2i+1]) rotated by the angle whose cos/sin are cos_TR2[t][i], sin_TR2[t][i], where
// t = n % T (position within the sequence) and R2 = R/2.
void rope_forward(Tensor& x_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2);
// The transpose (inverse rotation), in place on the gradient; dxq: the operands of the rows
// [N, H·W] after it.
void rope_backward(Tensor& dx_NHW, int64_t off, const Tensor& cos_TR2, const Tensor& sin_TR2,
                   const Operand& dxq = {});

// Causal softmax attention for each (b, h): o = softmax(scale · q kᵀ over s <= t) v, in tiles
// with an online softmax (no T×T buffer); lse_BHT receives each row's log-sum-exp for backward.
// q, k: [B, T, H, Kd]; v, o: [B, T, H, Vd]. operands BF16: both products take bf16-rounded
// operands (q, k, v, the probabilities), fp32 accumulation and softmax.
// oq: the operands of o viewed [B·T, H·V] (element-wise formats: each head writes its part).
void attention_forward(const Tensor& q_BTHK, const Tensor& k_BTHK, const Tensor& v_BTHV,
                       double scale, Tensor& lse_BHT, Tensor& o_BTHV, Format operands = Format::F32,
                       const Operand& oq = {});
// dq, dk, dv overwritten; the probabilities are recomputed from q, k and lse. operands BF16:
// every product's operands (q, k, v, dO, P, dS) rounded to bf16.
void attention_backward(const Tensor& do_BTHV, const Tensor& q_BTHK, const Tensor& k_BTHK,
                        const Tensor& v_BTHV, const Tensor& o_BTHV, const Tensor& lse_BHT,
                        double scale, Tensor& dq_BTHK, Tensor& dk_BTHK, Tensor& dv_BTHV,
                        Format operands = Format::F32);

// Decoding with a KV cache (model/kv_cache.h): the scores of n queries over S cached positions,
// softmaxed in place. Row r of s_RS is query r % n (rows come in groups of n, one group per
// head), at position first + r % n: columns s <= that position become softmax(scale · s) over
// them, columns beyond it 0.
void causal_softmax_rows(Tensor& s_RS, int64_t n, int64_t first, double scale);

// ---------------------------------------------------------------- layout
// out_N(A+B)[n] = [a[n] | b[n]].
void concat_cols(const Tensor& a_NA, const Tensor& b_NB, Tensor& out_NC, const Operand& q = {});
// Backward: da[n] = d[n, :A], db[n] = d[n, A:]. Overwrites.
void split_cols(const Tensor& d_NC, Tensor& da_NA, Tensor& db_NB);
// MLA head assembly: kv_NHW holds per head [k_nope (P) | v (U)], kr_NR the rope key shared by
// every head. k_NHK[n,h] = [kv[n,h,:P] | kr[n]], v_NHU[n,h] = kv[n,h,P:].
void mla_split_kv(const Tensor& kv_NHW, const Tensor& kr_NR, Tensor& k_NHK, Tensor& v_NHU);
// Backward: dkv[n,h] = [dk[n,h,:P] | dv[n,h]], dkr[n] = Σ_h dk[n,h,P:] (h in order). Overwrites.
void mla_split_kv_backward(const Tensor& dk_NHK, const Tensor& dv_NHU, Tensor& dkv_NHW,
                           Tensor& dkr_NR, const Operand& dkvq = {});

// ---------------------------------------------------------------- mixture of experts
struct RouterSpec {
  int64_t n_experts = 0;   // E
  int64_t n_group = 1;     // G (E % G == 0)
  int64_t topk_group = 1;  // groups kept per token
  int64_t top_k = 1;       // K experts per token
  bool norm_topk_prob = true;
  double scaling = 1.0;  // routed_scaling_factor
};

// scores = sigmoid(logits); selection scores = scores + bias_E; group score = sum of the 2
// largest selection scores of each group (the largest one if a group has one expert); keep the
// topk_group best groups (ties: lower index first); choose the K largest selection scores among
// kept experts (ties: lower expert index first), idx_NK (I32) in descending selection order;
// gates = scores of the chosen (unbiased), / their sum if norm_topk_prob, * scaling.
void router_forward(const Tensor& logits_NE, const Tensor& bias_E, const RouterSpec& spec,
                    Tensor& scores_NE, Tensor& idx_NK, Tensor& gates_NK);
// dlogits_NE = d/dlogits of Σ dgates·gates (through normalisation and sigmoid; the choice is
// constant). Overwrites dlogits.
void router_backward(const Tensor& dgates_NK, const Tensor& scores_NE, const Tensor& idx_NK,
                     const RouterSpec& spec, Tensor& dlogits_NE);
// Sequence-wise balance loss (docs/model.md) over B sequences of T tokens (N = B*T); returns
// the loss (mean over sequences). When dlogits is non-empty: dlogits += coef * dloss/dlogits.
double balance_loss(const Tensor& scores_NE, const Tensor& idx_NK, int64_t B, int64_t T,
                    double coef, Tensor& dlogits_NE);
// Router z-loss: mean over rows of logsumexp(logits)². dlogits += coef * dloss/dlogits.
double z_loss(const Tensor& logits_NE, double coef, Tensor& dlogits_NE);

// Counting sort of the N*K (token, k) assignments by expert, stable in (n, k) order:
// offsets_E1[e] = first permuted row of expert e (offsets[E] = N*K), slot_NK[n,k] = permuted
// row of assignment (n, k), token_M[m] = source token of permuted row m. All I32.
void moe_permute_plan(const Tensor& idx_NK, int64_t n_experts, Tensor& offsets_E1, Tensor& slot_NK,
                      Tensor& token_M);
// xp[m] = x[token[m]]. x and xp are F32 or BF16 bits (BF16 x into F32 xp widens; F32 x into
// BF16 xp rounds, exact when x holds bf16 values); xpq: xp's operands (rows ignored, cols
// blocks from its segments).
void gather_rows(const Tensor& x_ND, const Tensor& token_M, Tensor& xp_MD, const Operand& xpq = {});
// dx[n] += Σ_k dxp[slot[n,k]], k in order.
void gather_rows_backward(const Tensor& dxp_MD, const Tensor& slot_NK, Tensor& dx_ND);
// y[n] (= or += when accumulate) Σ_k gates[n,k] * yp[slot[n,k]], k in order.
void unpermute_forward(const Tensor& yp_MD, const Tensor& slot_NK, const Tensor& gates_NK,
                       Tensor& y_ND, bool accumulate);
// dyp[slot[n,k]] = gates[n,k] * dy[n]; dgates[n,k] = dy[n] · yp[slot[n,k]]. Overwrites both.
// token_M (the plan's): row m's token, so dyp can be written in row order with its operands dypq
// (empty token_M: no operands).
void unpermute_backward(const Tensor& dy_ND, const Tensor& yp_MD, const Tensor& slot_NK,
                        const Tensor& gates_NK, Tensor& dyp_MD, Tensor& dgates_NK,
                        const Tensor& token_M = {}, const Operand& dypq = {});

// ---------------------------------------------------------------- optimizer
struct AdamWSpec {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;         // 1-based, for bias correction
  double grad_scale = 1.0;  // g is used as grad_scale * g (global-norm clipping, fused)
};
// PyTorch AdamW on one flat range: p -= lr*wd*p; m, v updated; p -= lr*mhat/(sqrt(vhat)+eps).
// g is read only (scaled by grad_scale on the fly). m and v are each p's dtype or, beside fp32
// weights, bf16: widened, updated in fp32, p updated from the fp32 values, then stored rounded to
// nearest even (Transformer Engine's FusedAdam with exp_avg_dtype / exp_avg_sq_dtype bf16).
void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWSpec& spec);

}  // namespace moet::ops
