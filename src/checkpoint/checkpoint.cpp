#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "core/bf16.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "model/params.h"

namespace moet {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexFile = "checkpoint.json";
constexpr const char* kPiecesKey = "moet.pieces";  // a shard's piece list, in its metadata

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

// n elements of a stored piece (fp32, or bf16 when src_bf16) from element `from`, into `want`
// from element `to`, converted to want's dtype: bf16 widens to fp32 exactly, fp32 rounds to the
// nearest bf16 (ties to even) — a run resumes with moments in the dtype it asks for.
void copy_converted(const unsigned char* src, bool src_bf16, int64_t from, const StatePiece& want,
                    int64_t to, int64_t n) {
  if (src_bf16 == want.is_bf16()) {
    const size_t es = want.element_size();
    std::memcpy(static_cast<unsigned char*>(want.raw()) + size_t(to) * es, src + size_t(from) * es,
                size_t(n) * es);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (src_bf16) {
      uint16_t b;
      std::memcpy(&b, src + size_t(from + i) * 2, 2);
      want.data[to + i] = bf16_to_float(b);
    } else {
      float f;
      std::memcpy(&f, src + size_t(from + i) * 4, 4);
      want.bf16[to + i] = bf16_bits(f);
    }
  }
}

}  // namespace

std::string run_tokenizer_spec(const std::string& flag, const std::string& step_dir,
                               const std::string& fallback) {
  if (!flag.empty()) return flag;
  const fs::path step(step_dir);
  for (const fs::path& dir : {step, step.parent_path()})
    if (fs::is_regular_file(dir / "tokenizer.json")) return (dir / "tokenizer.json").string();
  return fallback;
}

void keep_run_tokenizer(const std::string& run_dir, const std::string& spec, bool copy) {
  const std::string kept = (fs::path(run_dir) / "tokenizer.json").string();
  const bool bytes = spec.empty() || spec == "byte";
  if (!fs::exists(kept)) {
    if (!bytes && copy) write_file_atomically(kept, read_text_file(spec), true, true);
    return;
  }
  MOET_CHECK(!bytes, "--out '", run_dir, "' was trained with the tokenizer ", kept,
             "; pass --tokenizer ", kept, " to continue it");
  MOET_CHECK(read_text_file(kept) == read_text_file(spec), "--tokenizer '", spec,
             "' differs from the tokenizer this run was trained with (", kept, ")");
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", (long long)step);
  return buf;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  // A step directory gets its final name only once complete, and `latest` is replaced after
  // that; a process killed in between leaves `latest` one checkpoint behind, so the newest
  // complete directory is what counts.
  const auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  MOET_CHECK(fs::is_directory(path), "no checkpoint at '", path, "': not a directory");
  if (fs::exists(fs::path(path) / kIndexFile)) return path;
  std::optional<std::string> latest = latest_checkpoint(path);
  MOET_CHECK(latest.has_value(), "no checkpoint at '", path, "': neither a ", kIndexFile,
             " nor a 'latest' pointer");
  return *latest;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::is_directory(run_dir)) return out;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() != 12 || name.rfind("step-", 0) != 0 || !e.is_directory()) continue;
    if (!std::all_of(name.begin() + 5, name.end(), ::isdigit)) continue;
    if (!fs::exists(e.path() / kIndexFile)) continue;
    out.emplace_back(std::stoll(name.substr(5)), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t write_rank_shard(const std::string& dir, int rank, const std::vector<StatePiece>& pieces) {
  SafetensorsWriter w;
  nlohmann::json list = nlohmann::json::array();
  int64_t bytes = 0;
  for (const StatePiece& p : pieces) {
    const bool whole = p.begin == 0 && p.n == shape_numel(p.shape);
    const std::string key = whole ? p.tensor : p.tensor + "@" + std::to_string(p.begin);
    const StDType dt = p.is_bf16() ? StDType::BF16 : StDType::F32;
    if (whole)
      w.add(key, dt, p.shape, p.raw());
    else
      w.add(key, dt, {p.n}, p.raw());
    const uint32_t crc = crc32c(p.raw(), p.bytes());
    list.push_back({{"tensor", p.tensor},
                    {"key", key},
                    {"shape", p.shape},
                    {"begin", p.begin},
                    {"n", p.n},
                    {"crc", crc32c_string(crc)}});
    if (p.is_bf16()) list.back()["dtype"] = "BF16";
    bytes += int64_t(p.bytes());
  }
  w.set_metadata(kPiecesKey, list.dump());
  w.set_metadata("format", "pt");
  w.write((fs::path(dir) / rank_file_name(rank)).string());
  return bytes;
}

void seal_checkpoint(const std::string& tmp_dir, int ranks, CheckpointIndex meta,
                     const std::string& config_json_path, double wait_s) {
  // Every rank's shard, as it appears (each is renamed into place complete).
  const auto t0 = std::chrono::steady_clock::now();
  meta.files.clear();
  meta.tensors.clear();
  for (int r = 0; r < ranks; ++r) {
    const std::string name = rank_file_name(r), path = (fs::path(tmp_dir) / name).string();
    while (!fs::exists(path)) {
      MOET_CHECK(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < wait_s,
          "checkpoint: rank ", r, " did not write ", path, " within ", wait_s, " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    SafetensorsReader shard(path);
    const auto it = shard.metadata().find(kPiecesKey);
    MOET_CHECK(it != shard.metadata().end(), path, " has no piece list");
    for (const auto& p : nlohmann::json::parse(it->second)) {
      PieceRef ref{name, p["key"].get<std::string>(), p["begin"].get<int64_t>(),
                   p["n"].get<int64_t>(), parse_crc32c_string(p["crc"].get<std::string>(), path)};
      TensorEntry& e = meta.tensors[p["tensor"].get<std::string>()];
      e.shape = p["shape"].get<std::vector<int64_t>>();
      e.bf16 = p.value("dtype", "F32") == "BF16";  // every piece of a tensor is of one dtype
      e.pieces.push_back(ref);
    }
    meta.files.push_back(name);
  }
  for (auto& [name, e] : meta.tensors)
    std::sort(e.pieces.begin(), e.pieces.end(),
              [](const PieceRef& a, const PieceRef& b) { return a.begin < b.begin; });
  const std::string text = format_checkpoint_index(meta);
  parse_checkpoint_index(text, "the checkpoint being written");  // every element exactly once
  write_file_atomically((fs::path(tmp_dir) / "config.json").string(),
                        read_text_file(config_json_path), true, true);
  write_file_atomically((fs::path(tmp_dir) / kIndexFile).string(), text, true, true);
  fsync_path(tmp_dir, true);
}

std::string publish_checkpoint(const std::string& run_dir, const std::string& tmp_dir, int64_t step,
                               int64_t keep_last) {
  const std::string name = step_dir_name(step);
  const fs::path final_dir = fs::path(run_dir) / name;
  MOET_CHECK(!fs::exists(final_dir), "checkpoint ", final_dir.string(),
             " already exists; not overwriting it");
  MOET_CHECK(::rename(tmp_dir.c_str(), final_dir.c_str()) == 0, "cannot rename ", tmp_dir, " to ",
             final_dir.string(), ": ", std::strerror(errno));
  fsync_path(run_dir, true);
  write_file_atomically((fs::path(run_dir) / "latest").string(), name + "\n", true, true);
  if (keep_last > 0) {
    auto all = list_checkpoints(run_dir);
    for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i)
      if (all[i].second != final_dir.string()) fs::remove_all(all[i].second);
  }
  return final_dir.string();
}

nlohmann::json read_json_file(const std::string& path) {
  try {
    return nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    MOET_FAIL("'", path, "' is not valid JSON (", e.what(), ")");
  }
}

CheckpointReader::CheckpointReader(const std::string& step_dir) : dir_(step_dir) {
  const std::string path = (fs::path(step_dir) / kIndexFile).string();
  MOET_CHECK(fs::exists(path), "no checkpoint at '", step_dir, "': ", kIndexFile, " is missing");
  index_ = parse_checkpoint_index(read_text_file(path), path);
}

void CheckpointReader::check_model(const nlohmann::json& model_config) const {
  const nlohmann::json& saved = index_.model_config;
  for (const auto& [key, value] : model_config.items()) {
    const std::string s = saved.contains(key) ? saved[key].dump() : "(absent)";
    MOET_CHECK(saved.contains(key) && saved[key] == value, "checkpoint ", dir_,
               " is of another model: config field '", key, "' is ", s, " there and ", value.dump(),
               " in this run's config");
  }
  for (const auto& [key, value] : saved.items())
    MOET_CHECK(model_config.contains(key), "checkpoint ", dir_,
               " is of another model: config field '", key, "' is ", value.dump(),
               " there and absent in this run's config");
}

void CheckpointReader::check_tensors(const std::vector<StatePiece>& pieces, const std::string& kind,
                                     bool complete) const {
  std::set<std::string> names;
  for (const StatePiece& p : pieces) {
    names.insert(p.tensor);
    const auto it = index_.tensors.find(p.tensor);
    MOET_CHECK(it != index_.tensors.end(), "checkpoint ", dir_, " lacks tensor '", p.tensor, "'");
    MOET_CHECK(it->second.shape == p.shape, "checkpoint ", dir_, ": tensor '", p.tensor,
               "' has shape ", shape_text(it->second.shape), " but the model's is ",
               shape_text(p.shape));
  }
  if (!complete) return;
  for (const auto& [name, t] : index_.tensors)
    MOET_CHECK(name.rfind(kind, 0) != 0 || names.count(name), "checkpoint ", dir_, " has tensor '",
               name, "' that the model lacks");
}

const unsigned char* CheckpointReader::stored(const PieceRef& p, const std::string& tensor) const {
  std::unique_ptr<SafetensorsReader>& r = readers_[p.file];
  const std::string path = (fs::path(dir_) / p.file).string();
  if (!r) {
    try {
      r = std::make_unique<SafetensorsReader>(path);
    } catch (const Error& e) {
      readers_.erase(p.file);
      MOET_FAIL("checkpoint file ", path, " is unreadable (tensor '", tensor, "'): ", e.what());
    }
  }
  MOET_CHECK(r->contains(p.key), "checkpoint file ", path, " lacks '", p.key, "' (tensor '", tensor,
             "')");
  const StTensorInfo& info = r->info(p.key);
  const StDType want = index_.tensors.at(tensor).bf16 ? StDType::BF16 : StDType::F32;
  MOET_CHECK(info.dtype == want && info.numel() == p.n, "checkpoint file ", path, ": '", p.key,
             "' is not ", p.n, " ", st_dtype_name(want), " elements (tensor '", tensor, "')");
  const auto* bytes = static_cast<const unsigned char*>(r->raw(p.key));
  bool& ok = verified_[{p.file, p.key}];
  if (!ok) {
    const uint32_t crc = crc32c(bytes, size_t(p.n) * st_dtype_size(want));
    MOET_CHECK(crc == p.crc, "checkpoint file ", path, ": checksum mismatch in tensor '", tensor,
               "' (", p.key, "): stored ", crc32c_string(p.crc), ", computed ", crc32c_string(crc));
    ok = true;
  }
  return bytes;
}

void CheckpointReader::read(const std::vector<StatePiece>& pieces) const {
  for (const StatePiece& want : pieces) {
    const auto it = index_.tensors.find(want.tensor);
    MOET_CHECK(it != index_.tensors.end(), "checkpoint ", dir_, " lacks tensor '", want.tensor,
               "'");
    MOET_CHECK(it->second.shape == want.shape, "checkpoint ", dir_, ": tensor '", want.tensor,
               "' has shape ", shape_text(it->second.shape), " but the model's is ",
               shape_text(want.shape));
    const int64_t lo = want.begin, hi = want.begin + want.n;
    for (const PieceRef& p : it->second.pieces) {
      const int64_t a = std::max(lo, p.begin), b = std::min(hi, p.begin + p.n);
      if (a >= b) continue;
      copy_converted(stored(p, want.tensor), it->second.bf16, a - p.begin, want, a - lo, b - a);
    }
  }
}

std::vector<float> CheckpointReader::read_tensor(const std::string& name) const {
  const auto it = index_.tensors.find(name);
  MOET_CHECK(it != index_.tensors.end(), "checkpoint ", dir_, " lacks tensor '", name, "'");
  std::vector<float> out(size_t(shape_numel(it->second.shape)));
  read({StatePiece{name, it->second.shape, 0, int64_t(out.size()), out.data()}});
  return out;
}

int64_t CheckpointReader::verify_all() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : index_.tensors)
    for (const PieceRef& p : t.pieces) {
      stored(p, name);
      bytes += p.n * (t.bf16 ? 2 : 4);
    }
  return bytes;
}

void load_checkpoint_weights(const std::string& step_dir, ParamStore& ps, bool complete) {
  CheckpointReader reader(step_dir);
  StateHolder h;
  h.params = &ps;
  int ep = 1;  // experts sharded over ep ranks: the global shape tells
  for (const Weight& w : ps.weights())
    if (w.expert && w.value.ndim > 0) {
      const auto it = reader.index().tensors.find("param/" + w.name);
      if (it != reader.index().tensors.end() && !it->second.shape.empty() && w.value.size(0) > 0 &&
          it->second.shape[0] % w.value.size(0) == 0)
        ep = int(it->second.shape[0] / w.value.size(0));
      break;
    }
  h.ep = ep;
  const std::vector<StatePiece> pieces = training_state_pieces(h, false);
  reader.check_tensors(pieces, "param/", complete);
  reader.read(pieces);
  ps.mark_updated();
}

void save_weights_checkpoint(const std::string& step_dir, const ParamStore& ps,
                             const std::string& config_json_path) {
  MOET_CHECK(!fs::exists(step_dir), "'", step_dir, "' already exists; not overwriting it");
  const fs::path final_dir = fs::absolute(step_dir);
  const std::string tmp = final_dir.string() + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  StateHolder h;
  h.params = const_cast<ParamStore*>(&ps);  // read only: pieces are written, not filled
  write_rank_shard(tmp, 0, training_state_pieces(h, true));
  CheckpointIndex meta;
  meta.model_config = read_json_file(config_json_path);
  meta.run = {{"kind", "weights only"}};
  seal_checkpoint(tmp, 1, meta, config_json_path, 10);
  MOET_CHECK(::rename(tmp.c_str(), final_dir.c_str()) == 0, "cannot rename ", tmp, " to ",
             final_dir.string(), ": ", std::strerror(errno));
  fsync_path(final_dir.parent_path().string(), true);
}

}  // namespace moet
