// export_hf: a moet model as a Hugging Face directory (config.json, safetensors weights, sharded
// past a size limit with model.safetensors.index.json).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "checkpoint/hf.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "core/error.h"
#include "model/params.h"

namespace moet {

namespace {

namespace fs = std::filesystem;

struct HfTensor {
  std::string name;
  Tensor value;  // F32, contiguous (a weight or rows of one)
  StDType dtype;
  int64_t bytes() const { return value.numel() * int64_t(st_dtype_size(dtype)); }
};

// Every tensor of the hub layout in model order: the store's names weight by weight (the parts of
// a fused weight by row), with each MTP module's copies of the embedding (before its enorm) and
// the output head (after its shared_head.norm).
std::vector<HfTensor> hub_tensors(const ParamStore& ps, const ModelConfig& c, HfDType dtype) {
  std::map<const Weight*, std::map<int64_t, std::string>> parts;
  for (const auto& [name, slice] : ps.names()) parts[slice.weight][slice.row_begin] = name;
  std::map<std::string, std::string> copy_source;  // copy name -> the moet name it copies
  for (const hf::SharedCopy& s : hf::shared_copies(c, c.num_nextn_predict_layers))
    copy_source[s.name] = s.source;
  std::map<std::string, std::string> before, after;  // anchor name -> copy name
  for (int64_t k = 1; k <= c.num_nextn_predict_layers; ++k) {
    const std::string p = hf::mtp_prefix(c, k);
    before[p + "enorm.weight"] = p + "embed_tokens.weight";
    after[p + "shared_head.norm.weight"] = p + "shared_head.head.weight";
  }
  auto stored_as = [&](const std::string& name) {
    return dtype == HfDType::F32 || hf::kept_in_f32(name) ? StDType::F32 : StDType::BF16;
  };
  auto add_copy = [&](std::vector<HfTensor>& out, const std::string& name) {
    out.push_back({name, ps.named(copy_source.at(name)).value(), stored_as(name)});
  };
  std::vector<HfTensor> out;
  for (const Weight& w : ps.weights()) {
    for (const auto& [row, name] : parts[&w]) {
      if (before.count(name)) add_copy(out, before[name]);
      out.push_back({name, ps.named(name).value(), stored_as(name)});
      if (after.count(name)) add_copy(out, after[name]);
    }
  }
  return out;
}

// Export needs every expert (an expert-parallel store has only its own).
void check_whole_model(const ParamStore& ps, const ModelConfig& c) {
  auto check_layer = [&](const std::string& prefix, bool moe) {
    for (int64_t e = 0; moe && e < c.n_routed_experts; ++e) {
      const std::string name = prefix + "mlp.experts." + std::to_string(e) + ".down_proj.weight";
      MOET_CHECK(ps.names().count(name), "export to Hugging Face needs the whole model, but '",
                 name, "' is not in these parameters (an expert-parallel shard?)");
    }
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    check_layer("model.layers." + std::to_string(l) + ".", c.is_moe_layer(l));
  for (int64_t k = 1; k <= c.num_nextn_predict_layers; ++k) {
    MOET_CHECK(ps.names().count(hf::mtp_prefix(c, k) + "eh_proj.weight"),
               "the parameters lack MTP module ", k,
               " of the config's num_nextn_predict_layers=", c.num_nextn_predict_layers);
    check_layer(hf::mtp_prefix(c, k), c.mtp_is_moe());
  }
}

// Consecutive tensors, a new shard whenever the next tensor would take the current one past
// max_bytes (a tensor larger than that gets a shard of its own), as transformers shards.
std::vector<std::vector<const HfTensor*>> plan_shards(const std::vector<HfTensor>& tensors,
                                                      int64_t max_bytes) {
  std::vector<std::vector<const HfTensor*>> shards(1);
  int64_t used = 0;
  for (const HfTensor& t : tensors) {
    if (!shards.back().empty() && used + t.bytes() > max_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(&t);
    used += t.bytes();
  }
  return shards;
}

std::string shard_file_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void write_shard(const std::string& path, const std::vector<const HfTensor*>& tensors) {
  std::vector<std::vector<uint16_t>> converted;  // bf16 copies, alive until written
  SafetensorsWriter w;
  w.set_metadata("format", "pt");  // transformers' loader checks it
  for (const HfTensor* t : tensors) {
    std::vector<int64_t> shape(t->value.shape, t->value.shape + t->value.ndim);
    if (t->dtype == StDType::F32) {
      w.add(t->name, StDType::F32, shape, t->value.ptr);
      continue;
    }
    const int64_t n = t->value.numel();
    const float* src = t->value.f32();
    std::vector<uint16_t>& dst = converted.emplace_back(n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i]);
    w.add(t->name, StDType::BF16, shape, dst.data());
  }
  w.write(path);
}

// path.tmp, fsync, rename: a reader never sees half a file.
void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MOET_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  bool ok = true;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    ok = n > 0;
    if (ok) done += size_t(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(tmp.c_str());
    MOET_FAIL("cannot write '", path, "': ", std::strerror(e));
  }
}

// Weight files of an earlier export into the same directory that this one did not write.
void remove_stale_weight_files(const std::string& dir, const std::set<std::string>& keep) {
  static const std::regex kWeightFile(
      R"(model\.safetensors|model\.safetensors\.index\.json|model-\d{5}-of-\d{5}\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, kWeightFile) && !keep.count(name))
      fs::remove(entry.path());
  }
}

}  // namespace

HfExportResult export_hf(const ParamStore& ps, const ModelConfig& c, const std::string& source_json,
                         const std::string& out_dir, const HfExportOptions& opts) {
  MOET_CHECK(opts.max_shard_bytes > 0, "the shard size limit must be positive, got ",
             opts.max_shard_bytes);
  MOET_CHECK(ps.allocated(), "export_hf: the parameters are not allocated");
  check_whole_model(ps, c);
  // without MTP: the model transformers builds, and its config says so
  ModelConfig as_written = c;
  if (!opts.mtp) as_written.num_nextn_predict_layers = 0;
  std::string config = hf_config_json(as_written, source_json, "the model config", opts.dtype);
  if (opts.bos_token_id >= 0 || opts.eos_token_id >= 0) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(config);
    if (opts.bos_token_id >= 0) j["bos_token_id"] = opts.bos_token_id;
    if (opts.eos_token_id >= 0) j["eos_token_id"] = opts.eos_token_id;
    config = j.dump(2) + "\n";
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  MOET_CHECK(!ec && fs::is_directory(out_dir), "cannot create output directory '", out_dir,
             "': ", ec ? ec.message() : "a file of that name exists");

  std::vector<HfTensor> tensors = hub_tensors(ps, c, opts.dtype);
  if (!opts.mtp)
    for (int64_t k = 1; k <= c.num_nextn_predict_layers; ++k) {
      const std::string prefix = hf::mtp_prefix(c, k);
      std::erase_if(tensors, [&](const HfTensor& t) { return t.name.rfind(prefix, 0) == 0; });
    }
  const auto shards = plan_shards(tensors, opts.max_shard_bytes);
  HfExportResult r;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        shards.size() == 1 ? "model.safetensors" : shard_file_name(i, shards.size());
    write_shard(out_dir + "/" + file, shards[i]);
    r.files.push_back(file);
    for (const HfTensor* t : shards[i]) {
      weight_map[t->name] = file;
      r.bytes += t->bytes();
      ++r.tensors;
    }
  }
  std::set<std::string> written(r.files.begin(), r.files.end());
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", r.bytes}}},
                                  {"weight_map", weight_map}};
    write_text_atomically(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n");
    written.insert("model.safetensors.index.json");
  }
  write_text_atomically(out_dir + "/config.json", config);
  remove_stale_weight_files(out_dir, written);
  return r;
}

}  // namespace moet
