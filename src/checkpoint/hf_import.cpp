// load_hf_weights: a Hugging Face directory's weights into a moet model's parameters.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/hf.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "model/params.h"

namespace moet {

namespace {

namespace fs = std::filesystem;

constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kSingleFile[] = "model.safetensors";

// The tensors of a Hugging Face directory: model.safetensors, or the shards that
// model.safetensors.index.json lists, each opened (memory-mapped) on first use.
class HubFiles {
 public:
  explicit HubFiles(const std::string& dir) : dir_(dir) {
    if (fs::exists(dir + "/" + kIndexFile))
      read_index();
    else if (fs::exists(dir + "/" + kSingleFile))
      for (const std::string& n : open(kSingleFile).names()) file_of_[n] = kSingleFile;
    else
      MOET_FAIL("'", dir, "' has neither ", kSingleFile, " nor ", kIndexFile,
                " (a Hugging Face directory in the safetensors format)");
  }

  const std::map<std::string, std::string>& file_of() const { return file_of_; }
  bool contains(const std::string& name) const { return file_of_.count(name) != 0; }
  int64_t files_opened() const { return int64_t(readers_.size()); }

  // The file that holds `name` (which must be in file_of()).
  const SafetensorsReader& reader_for(const std::string& name) {
    const std::string& file = file_of_.at(name);
    const SafetensorsReader& r = open(file);
    MOET_CHECK(r.contains(name), dir_, "/", kIndexFile, " puts tensor '", name, "' in ", file,
               ", which has no such tensor");
    return r;
  }

 private:
  void read_index() {
    const std::string path = dir_ + "/" + kIndexFile;
    std::ifstream in(path);
    MOET_CHECK(in.good(), "cannot open '", path, "'");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      MOET_FAIL(path, ": not valid JSON (", e.what(), ")");
    }
    MOET_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), path,
               ": no \"weight_map\" object");
    for (const auto& [name, file] : j["weight_map"].items()) {
      MOET_CHECK(file.is_string(), path, ": weight_map['", name, "'] is not a file name");
      const std::string f = file.get<std::string>();
      MOET_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "..", path,
                 ": weight_map['", name, "'] names '", f, "', not a file in the directory");
      file_of_[name] = f;
    }
  }

  const SafetensorsReader& open(const std::string& file) {
    auto& r = readers_[file];
    if (!r) r = std::make_unique<SafetensorsReader>(dir_ + "/" + file);
    return *r;
  }

  std::string dir_;
  std::map<std::string, std::string> file_of_;  // tensor name -> file name in dir_
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

std::string shape_text(const int64_t* shape, int ndim) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float_type(StDType t) {
  return t == StDType::F32 || t == StDType::BF16 || t == StDType::F16 || t == StDType::F64;
}

// Reads `name` into dst (F32, contiguous), checking shape and type with one line each.
void read_checked(const SafetensorsReader& r, const std::string& name, const Tensor& dst) {
  const StTensorInfo& info = r.info(name);
  const std::vector<int64_t> want(dst.shape, dst.shape + dst.ndim);
  MOET_CHECK(info.shape == want, r.path(), ": tensor '", name, "' has shape ", info.shape_str(),
             " but the model's is ", shape_text(dst.shape, dst.ndim));
  MOET_CHECK(is_float_type(info.dtype), r.path(), ": tensor '", name, "' is ",
             st_dtype_name(info.dtype), "; moet reads F32, BF16, F16 or F64 weights");
  r.read_f32(name, dst.f32(), dst.numel());
}

// A copy the hub layout keeps of a tensor moet stores once must equal it.
void check_copy(HubFiles& files, const hf::SharedCopy& copy, const ParamStore& ps) {
  const SafetensorsReader& r = files.reader_for(copy.name);
  const Tensor source = ps.named(copy.source).value();
  const StTensorInfo& info = r.info(copy.name);
  const std::vector<int64_t> want(source.shape, source.shape + source.ndim);
  MOET_CHECK(info.shape == want && is_float_type(info.dtype), r.path(), ": tensor '", copy.name,
             "' (", st_dtype_name(info.dtype), " ", info.shape_str(), ") cannot be a copy of '",
             copy.source, "' (", shape_text(source.shape, source.ndim), ")");
  if (files.contains(copy.source)) {  // the same bytes as the stored original: no conversion
    const SafetensorsReader& o = files.reader_for(copy.source);
    const StTensorInfo& oi = o.info(copy.source);
    if (oi.dtype == info.dtype && oi.shape == info.shape &&
        std::memcmp(o.raw(copy.source), r.raw(copy.name), oi.end - oi.begin) == 0)
      return;
  }
  std::vector<float> values(source.numel());
  r.read_f32(copy.name, values.data(), source.numel());
  MOET_CHECK(std::memcmp(values.data(), source.ptr, source.bytes()) == 0, r.path(), ": tensor '",
             copy.name, "' differs from '", copy.source,
             "'; moet shares one tensor for both (DeepSeek-V3's MTP modules share the main "
             "model's embedding and output head)");
}

}  // namespace

HfLoadResult load_hf_weights(const std::string& dir, const ModelConfig& model, ParamStore& ps) {
  MOET_CHECK(ps.allocated(), "load_hf_weights: the parameters are not allocated");
  check_hf_config_matches(load_hf_config(dir), model, dir + "/config.json");
  HubFiles files(dir);

  // An MTP module is in the directory when any tensor of its layer is.
  std::set<int64_t> mtp_present;
  for (const auto& [name, file] : files.file_of()) {
    const int64_t k = hf::mtp_depth_of(name, model);
    if (k > 0) mtp_present.insert(k);
  }
  HfLoadResult result;
  for (int64_t k = 1; k <= model.num_nextn_predict_layers; ++k)
    if (!mtp_present.count(k)) result.mtp_missing.push_back(k);

  for (const auto& [name, slice] : ps.names()) {
    const int64_t k = hf::mtp_depth_of(name, model);
    if (k > 0 && !mtp_present.count(k)) continue;
    MOET_CHECK(files.contains(name), dir, ": no tensor '", name,
               "', which a model of this config has");
    read_checked(files.reader_for(name), name, slice.value());
    ++result.tensors;
  }

  // Every other tensor must be one this model legitimately lacks.
  std::map<std::string, hf::SharedCopy> copies;
  for (const hf::SharedCopy& c : hf::shared_copies(model, model.num_nextn_predict_layers))
    copies[c.name] = c;
  for (const auto& [name, file] : files.file_of()) {
    if (ps.names().count(name)) continue;
    if (copies.count(name)) {
      check_copy(files, copies[name], ps);
      continue;
    }
    const bool deeper_mtp = hf::mtp_depth_of(name, model) > model.num_nextn_predict_layers;
    const bool other_rank_expert = hf::is_routed_expert_name(name, model);
    MOET_CHECK(deeper_mtp || other_rank_expert, dir, "/", file, ": tensor '", name,
               "' is not part of a model of this config");
  }
  result.files = files.files_opened();
  ps.mark_updated();
  return result;
}

bool is_hf_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  return fs::is_regular_file(d / "config.json") && !fs::exists(d / "checkpoint.json") &&
         (fs::is_regular_file(d / "model.safetensors") ||
          fs::is_regular_file(d / "model.safetensors.index.json"));
}

}  // namespace moet
