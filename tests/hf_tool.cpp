// hf_tool — moet's side of tests/hf_interop.py, the Hugging Face interop check against
// transformers. A model is a config plus a seed (Model::init_parameters).
//
//   hf_tool export CONFIG SEED OUT_DIR fp32|bf16 [MAX_SHARD_BYTES]
//       writes the seeded model as a Hugging Face directory (export_hf)
//   hf_tool logits CONFIG SEED IDS.safetensors OUT.safetensors [HF_DIR]
//       the seeded model, or HF_DIR's weights loaded into it, run forward on IDS' input_ids
//       (I64 [B, T]); writes input_ids (I64 [B, T]) and logits (F32 [B, T, V])
//   hf_tool compare CONFIG SEED HF_DIR
//       loads HF_DIR into a model seeded differently and checks every parameter bitwise equal
//       to the seeded model's (MTP modules HF_DIR lacks are skipped and counted); exit 1 if not
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/hf.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "model/model.h"

namespace {

using namespace moet;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  MOET_CHECK(in.good(), "cannot open ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t parse_seed(const char* s) { return std::strtoull(s, nullptr, 10); }

int run_export(int argc, char** argv) {
  MOET_CHECK(argc == 6 || argc == 7,
             "usage: hf_tool export CONFIG SEED OUT_DIR fp32|bf16 [MAX_SHARD_BYTES]");
  const ModelConfig cfg = load_model_config(argv[2]);
  Model m(cfg, {.micro_batch = 1, .seq_len = 1});
  m.init_parameters(parse_seed(argv[3]));
  HfExportOptions opts;
  opts.dtype = parse_hf_dtype(argv[5]);
  if (argc == 7) opts.max_shard_bytes = std::atoll(argv[6]);
  const HfExportResult r = export_hf(m.params(), cfg, read_text(argv[2]), argv[4], opts);
  std::printf("exported %lld tensors, %lld bytes, %zu file(s) to %s\n", (long long)r.tensors,
              (long long)r.bytes, r.files.size(), argv[4]);
  return 0;
}

void report_missing_mtp(const HfLoadResult& r, const char* dir) {
  for (int64_t k : r.mtp_missing)
    std::fprintf(stderr, "hf_tool: %s has no MTP module %lld; its parameters keep the seed's\n",
                 dir, (long long)k);
}

int run_logits(int argc, char** argv) {
  MOET_CHECK(argc == 6 || argc == 7,
             "usage: hf_tool logits CONFIG SEED IDS.safetensors OUT.safetensors [HF_DIR]");
  const ModelConfig cfg = load_model_config(argv[2]);
  SafetensorsReader ids_file(argv[4]);
  const StTensorInfo& info = ids_file.info("input_ids");
  MOET_CHECK(info.shape.size() == 2, argv[4], ": input_ids must be [B, T]");
  const int64_t B = info.shape[0], T = info.shape[1], V = cfg.vocab_size;
  const std::vector<int32_t> ids = ids_file.read_i32("input_ids");
  Model m(cfg, {.micro_batch = B, .seq_len = T});
  m.init_parameters(parse_seed(argv[3]));
  if (argc == 7) report_missing_mtp(load_hf_weights(argv[6], cfg, m.params()), argv[6]);
  // forward() takes T+1 tokens a row (inputs and next-token targets); the last target is a
  // placeholder that no logit depends on.
  std::vector<int32_t> seq(B * (T + 1), 0);
  for (int64_t b = 0; b < B; ++b) std::memcpy(&seq[b * (T + 1)], &ids[b * T], T * sizeof(int32_t));
  m.forward(seq.data());
  std::vector<float> logits(B * T * V);
  Tensor logits_NV(logits.data(), DType::F32, {B * T, V});
  m.logits(logits_NV);
  std::vector<int64_t> ids64(ids.begin(), ids.end());
  SafetensorsWriter w;
  w.add("input_ids", StDType::I64, {B, T}, ids64.data());
  w.add("logits", StDType::F32, {B, T, V}, logits.data());
  w.write(argv[5]);
  return 0;
}

int run_compare(int argc, char** argv) {
  MOET_CHECK(argc == 5, "usage: hf_tool compare CONFIG SEED HF_DIR");
  const ModelConfig cfg = load_model_config(argv[2]);
  const uint64_t seed = parse_seed(argv[3]);
  Model want(cfg, {.micro_batch = 1, .seq_len = 1}), got(cfg, {.micro_batch = 1, .seq_len = 1});
  want.init_parameters(seed);
  got.init_parameters(seed + 1);
  const HfLoadResult r = load_hf_weights(argv[4], cfg, got.params());
  report_missing_mtp(r, argv[4]);
  int64_t equal = 0, skipped = 0;
  for (const auto& [name, slice] : want.params().names()) {
    const int64_t k = hf::mtp_depth_of(name, cfg);
    if (k > 0 && std::find(r.mtp_missing.begin(), r.mtp_missing.end(), k) != r.mtp_missing.end()) {
      ++skipped;
      continue;
    }
    const Tensor a = slice.value(), b = got.params().named(name).value();
    if (std::memcmp(a.ptr, b.ptr, a.bytes()) != 0) {
      std::fprintf(stderr, "hf_tool: '%s' differs after the round trip\n", name.c_str());
      return 1;
    }
    ++equal;
  }
  std::printf("%lld tensors bitwise equal, %lld skipped (MTP modules not in %s)\n",
              (long long)equal, (long long)skipped, argv[4]);
  return equal > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "export") return run_export(argc, argv);
    if (cmd == "logits") return run_logits(argc, argv);
    if (cmd == "compare") return run_compare(argc, argv);
    std::fprintf(stderr, "usage: hf_tool export|logits|compare ... (see tests/hf_tool.cpp)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_tool: error: %s\n", e.what());
    return 1;
  }
}
