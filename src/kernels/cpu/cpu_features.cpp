// cpu_features.cpp — what this CPU multiplies in hardware, as oneDNN sees it (it picks its own
// kernels at run time: AMX, AVX512_BF16, AVX-512, AVX2), and which dtype GEMM operands of the
// low-precision formats are stored in here.
#include <dnnl.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"

namespace moet::ops {
namespace {

dnnl_cpu_isa_t effective_isa() {
  static const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa;
}

bool has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t feature) {
  return (unsigned(isa) & unsigned(feature)) == unsigned(feature);
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  if (has(isa, dnnl_cpu_isa_avx512_core_amx)) return "AMX";
  if (has(isa, dnnl_cpu_isa_avx512_core_bf16)) return "AVX512_BF16";
  if (has(isa, dnnl_cpu_isa_avx512_core)) return "AVX-512";
  if (has(isa, dnnl_cpu_isa_avx2)) return "AVX2";
  return "SSE4.1";
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// The CPU's own bf16 GEMM instructions, as oneDNN sees them.
bool cpu_isa_has_bf16() { return has(effective_isa(), dnnl_cpu_isa_avx512_core_bf16); }

}  // namespace

bool cpu_has_bf16() {
  // MOET_NO_BF16_GEMM=1 takes the fp32 path on any CPU (tests of the fallback).
  static const bool yes = !env_flag("MOET_NO_BF16_GEMM") && cpu_isa_has_bf16();
  return yes;
}

namespace cpu {
bool bf16_gemm_native() { return cpu_has_bf16(); }
bool cpu_has_avx512() { return has(effective_isa(), dnnl_cpu_isa_avx512_core); }
}  // namespace cpu

namespace {

struct OperandStore {
  DType dtype;
  std::string reason;
};

// The default store, by what the CPU has and the test switches.
OperandStore default_store() {
  // MOET_BF16_OPERANDS=1 stores low-precision operands as bf16 on any CPU (blas.cpp widens them
  // where the CPU has no bf16 GEMM): the bf16 storage paths then run, and are tested, everywhere.
  if (env_flag("MOET_BF16_OPERANDS")) return {DType::BF16, "MOET_BF16_OPERANDS=1"};
  if (env_flag("MOET_NO_BF16_GEMM")) return {DType::F32, "MOET_NO_BF16_GEMM=1"};
  if (cpu_isa_has_bf16()) return {DType::BF16, "bf16 instructions"};
  return {DType::F32, "no bf16 instructions"};
}

OperandStore& store() {
  static OperandStore s = default_store();
  return s;
}

}  // namespace

DType gemm_operand_dtype() { return store().dtype; }

void set_gemm_operand_dtype(DType dtype, const std::string& reason) {
  MOET_ASSERT(dtype == DType::BF16 || dtype == DType::F32);
  if (gemm_operand_dtype_forced()) return;
  store() = {dtype, reason};
}

const std::string& gemm_operand_reason() { return store().reason; }

bool gemm_operand_dtype_forced() {
  static const bool forced = env_flag("MOET_BF16_OPERANDS") || env_flag("MOET_NO_BF16_GEMM");
  return forced;
}

std::string kernel_description(Format fmt, bool with_reason) {
  std::string isa = isa_name(effective_isa());
  if (fmt == Format::F32) return isa + ", fp32 GEMMs (oneDNN sgemm)";
  const std::string what =
      fmt == Format::BF16 ? "bf16" : std::string(format_name(fmt)) + " as bf16";
  const std::string why = with_reason ? " (" + gemm_operand_reason() + ")" : "";
  if (gemm_operand_dtype() == DType::F32)
    return isa + ", " + what + " values in fp32 GEMMs: exact products, fp32 accumulation" + why;
  if (cpu_has_bf16())
    return isa + ", " + what + " GEMMs (oneDNN gemm_bf16bf16f32, fp32 accumulation)" +
           (gemm_operand_reason() == "bf16 instructions" || !with_reason ? "" : why);
  return isa + ", " + what +
         " operands stored as bf16, widened into fp32 GEMMs: exact products, fp32 accumulation" +
         why;
}

}  // namespace moet::ops
