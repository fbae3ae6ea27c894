// quant_dump — runs moet's quantizers on a raw float32 file for reference/quant_check.py, which
// compares the results bit for bit with ml_dtypes.
//
// usage: quant_dump FORMAT AXIS ROWS COLS IN.f32 OUTDIR
//   FORMAT: mxfp8 | fp8-blockwise | bf16;  AXIS: rows | cols | square
// writes OUTDIR/codes.u8 (E4M3 bits, ROWS×COLS), OUTDIR/scales (U8 E8M0 exponents for mxfp8,
// float32 dequantisation scales for fp8-blockwise, one per block, row-major over the block
// grid), OUTDIR/values.f32 (the quantized values) and OUTDIR/values.bf16 (the same values stored
// as bf16). For bf16 only values.f32 and values.bf16.
//
// usage: quant_dump nvfp4 rows|square|rows-rht ROWS COLS IN.f32 OUTDIR
//        quant_dump mxfp4 rows ROWS COLS IN.f32 OUTDIR
// (reference/fp4_check.py) writes OUTDIR/codes.f32 (the E2M1 elements as float32, ROWS×COLS),
// OUTDIR/scales.f32 (the block decode scales as float32, one per 16-element (mxfp4: 32) row block,
// ROWS×ceil(COLS/b); a 16×16 block's scale repeated on its 16 rows), OUTDIR/amax.f32 (the tensor's
// amax after any transform), OUTDIR/values.f32 and OUTDIR/values.bf16 (element × decode scale).
// rows-rht applies Transformer Engine's reference 16-point Hadamard transform (its fixed sign
// vector) along each row before quantizing.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"

namespace {

using namespace moet;

std::vector<char> read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  MOET_CHECK(f, "cannot open ", path);
  std::vector<char> b;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
  std::fclose(f);
  return b;
}

void write_file(const std::string& path, const void* p, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  MOET_CHECK(f && std::fwrite(p, 1, n, f) == n, "cannot write ", path);
  std::fclose(f);
}

// The 4-bit formats: see the usage above.
int run_fp4(const std::string& fmt, const std::string& layout, int64_t R, int64_t C,
            std::vector<float>& x, const std::string& out) {
  const ops::Format f = fmt == "nvfp4" ? ops::Format::NVFP4 : ops::Format::MXFP4;
  MOET_CHECK(
      layout == "rows" || (f == ops::Format::NVFP4 && (layout == "square" || layout == "rows-rht")),
      "unknown layout ", layout, " for ", fmt);
  const ops::BlockAxis a = layout == "square" ? ops::BlockAxis::Square : ops::BlockAxis::Rows;
  ops::Fp4Options o;
  o.hadamard = layout == "rows-rht";
  const int64_t b = ops::format_block(f), nb = (C + b - 1) / b;
  Tensor xt(x.data(), DType::F32, {R, C});
  std::vector<float> codes(R * C), values(R * C), scales(ops::scale_count(xt, f, a));
  std::vector<uint16_t> vb(R * C);
  ops::Fp4Outputs q{Tensor(values.data(), DType::F32, {R, C}),
                    Tensor(codes.data(), DType::F32, {R, C}),
                    Tensor(scales.data(), DType::F32, {int64_t(scales.size())})};
  const ops::Fp4Result res = ops::quantize_fp4(xt, f, a, q, o);
  ops::quantize_fp4(xt, f, a, {Tensor(vb.data(), DType::BF16, {R, C}), {}, {}}, o);
  std::vector<float> row_scales(R * nb);  // one per 16-element row block
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < nb; ++k)
      row_scales[r * nb + k] =
          a == ops::BlockAxis::Square ? scales[(r / b) * nb + k] : scales[r * nb + k];
  const float amax = f == ops::Format::NVFP4 ? res.amax : ops::fp4_amax(xt, a, o);
  write_file(out + "/codes.f32", codes.data(), codes.size() * 4);
  write_file(out + "/scales.f32", row_scales.data(), row_scales.size() * 4);
  write_file(out + "/amax.f32", &amax, 4);
  write_file(out + "/values.f32", values.data(), values.size() * 4);
  write_file(out + "/values.bf16", vb.data(), vb.size() * 2);
  return 0;
}

int run(int argc, char** argv) {
  MOET_CHECK(argc == 7, "usage: quant_dump FORMAT AXIS ROWS COLS IN.f32 OUTDIR");
  const std::string fmt = argv[1], axis = argv[2], out = argv[6];
  const int64_t R = std::atoll(argv[3]), C = std::atoll(argv[4]);
  if (fmt == "nvfp4" || fmt == "mxfp4") {
    std::vector<char> raw = read_file(argv[5]);
    MOET_CHECK(int64_t(raw.size()) == R * C * 4, "input has ", raw.size(), " bytes, want ",
               R * C * 4);
    std::vector<float> x(R * C);
    std::memcpy(x.data(), raw.data(), raw.size());
    return run_fp4(fmt, axis, R, C, x, out);
  }
  ops::Format f = fmt == "mxfp8"           ? ops::Format::MXFP8
                  : fmt == "fp8-blockwise" ? ops::Format::FP8Block
                  : fmt == "bf16"          ? ops::Format::BF16
                                           : (MOET_FAIL("unknown format ", fmt), ops::Format::F32);
  ops::BlockAxis a = axis == "rows"   ? ops::BlockAxis::Rows
                     : axis == "cols" ? ops::BlockAxis::Cols
                                      : ops::BlockAxis::Square;
  std::vector<char> raw = read_file(argv[5]);
  MOET_CHECK(int64_t(raw.size()) == R * C * 4, "input has ", raw.size(), " bytes, want ",
             R * C * 4);
  std::vector<float> x(R * C), q(R * C);
  std::memcpy(x.data(), raw.data(), raw.size());
  std::vector<uint16_t> qb(R * C);
  Tensor xt(x.data(), DType::F32, {R, C}), qt(q.data(), DType::F32, {R, C});
  Tensor qbt(qb.data(), DType::BF16, {R, C});
  ops::quantize(xt, f, a, qbt);
  write_file(out + "/values.bf16", qb.data(), qb.size() * 2);
  if (!ops::is_fp8(f)) {
    ops::quantize(xt, f, a, qt);
    write_file(out + "/values.f32", q.data(), q.size() * 4);
    return 0;
  }
  const int64_t ns = ops::scale_count(xt, f, a);
  std::vector<uint8_t> codes(R * C), s8(ns);
  std::vector<float> s32(ns);
  Tensor ct(codes.data(), DType::U8, {R, C});
  Tensor st = f == ops::Format::MXFP8 ? Tensor(s8.data(), DType::U8, {ns})
                                      : Tensor(s32.data(), DType::F32, {ns});
  ops::quantize_packed(xt, f, a, ct, st, qt);
  write_file(out + "/codes.u8", codes.data(), codes.size());
  if (f == ops::Format::MXFP8)
    write_file(out + "/scales", s8.data(), s8.size());
  else
    write_file(out + "/scales", s32.data(), s32.size() * 4);
  write_file(out + "/values.f32", q.data(), q.size() * 4);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_dump: error: %s\n", e.what());
    return 1;
  }
}
