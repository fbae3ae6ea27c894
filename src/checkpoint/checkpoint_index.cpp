#include "checkpoint/checkpoint_index.h"

#include <set>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/json_depth_limit.h"

namespace moet {

namespace {

constexpr const char* kFormat = "moet-checkpoint";

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& ctx) {
  MOET_CHECK(j.contains(key), ctx, ": missing \"", key, "\"");
  const nlohmann::json& v = j[key];
  MOET_CHECK(v.is_number_integer(), ctx, ": \"", key, "\" must be an integer");
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    MOET_CHECK(u <= uint64_t(INT64_MAX), ctx, ": \"", key, "\" is out of range");
    return int64_t(u);
  }
  return v.get<int64_t>();
}

int64_t get_count(const nlohmann::json& j, const char* key, const std::string& ctx) {
  const int64_t v = get_int(j, key, ctx);
  MOET_CHECK(v >= 0, ctx, ": \"", key, "\" must be >= 0, got ", v);
  return v;
}

std::string get_string(const nlohmann::json& j, const char* key, const std::string& ctx) {
  MOET_CHECK(j.contains(key) && j[key].is_string(), ctx, ": \"", key, "\" must be a string");
  return j[key].get<std::string>();
}

}  // namespace

uint32_t parse_crc32c_string(const std::string& s, const std::string& ctx) {
  MOET_CHECK(s.size() == 15 && s.rfind("crc32c:", 0) == 0, ctx, ": checksum '", s,
             "' is not crc32c:XXXXXXXX");
  uint32_t v = 0;
  for (size_t i = 7; i < s.size(); ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    MOET_CHECK(d >= 0, ctx, ": checksum '", s, "' is not crc32c:XXXXXXXX");
    v = v << 4 | uint32_t(d);
  }
  return v;
}

namespace {

std::vector<int64_t> parse_shape(const nlohmann::json& v, const std::string& ctx) {
  MOET_CHECK(v.is_array() && v.size() <= 8, ctx, ": shape must be an array of at most 8 sizes");
  std::vector<int64_t> shape;
  int64_t n = 1;
  for (const auto& d : v) {
    MOET_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < (1LL << 40),
               ctx, ": shape sizes must be integers in [0, 2^40)");
    shape.push_back(d.get<int64_t>());
    MOET_CHECK(shape.back() == 0 || n <= (int64_t{1} << 50) / shape.back(), ctx,
               ": shape is too large");
    n *= shape.back();
  }
  return shape;
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool plain_file_name(const std::string& f) {
  return !f.empty() && f.size() < 256 && f.find('/') == std::string::npos && f != "." &&
         f != ".." && f.find('\0') == std::string::npos;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t CheckpointIndex::total_bytes() const {
  int64_t b = 0;
  for (const auto& [name, t] : tensors) b += shape_numel(t.shape) * (t.bf16 ? 2 : 4);
  return b;
}

CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, json_depth_limit(source));
  } catch (const nlohmann::json::exception& e) {
    MOET_FAIL(source, " is not valid JSON (", e.what(), ")");
  }
  MOET_CHECK(j.is_object(), source, " must hold a JSON object");
  MOET_CHECK(j.contains("format") && j["format"] == kFormat, source, " is not a moet checkpoint");
  const int64_t version = get_int(j, "version", source);
  MOET_CHECK(version == CheckpointIndex::kVersion, source, " has format version ", version,
             "; this moet reads version ", CheckpointIndex::kVersion);
  CheckpointIndex ix;
  ix.step = get_count(j, "step", source);
  ix.consumed_samples = get_count(j, "consumed_samples", source);
  ix.tokens = get_count(j, "tokens", source);
  ix.data_cursor = get_count(j, "data_cursor", source);
  ix.global_batch = get_count(j, "global_batch", source);
  ix.adam_steps = get_count(j, "adam_steps", source);
  MOET_CHECK(j.contains("seed") && j["seed"].is_number_unsigned(), source,
             ": \"seed\" must be a non-negative integer");
  ix.seed = j["seed"].get<uint64_t>();
  if (j.contains("run")) {
    MOET_CHECK(j["run"].is_object(), source, ": \"run\" must be an object");
    ix.run = j["run"];
  }
  MOET_CHECK(j.contains("model_config") && j["model_config"].is_object(), source,
             ": \"model_config\" must be an object");
  ix.model_config = j["model_config"];
  MOET_CHECK(j.contains("files") && j["files"].is_array(), source, ": \"files\" must be an array");
  std::set<std::string> files;
  for (const auto& f : j["files"]) {
    MOET_CHECK(f.is_string() && plain_file_name(f.get<std::string>()), source,
               ": \"files\" must hold plain file names");
    MOET_CHECK(files.insert(f.get<std::string>()).second, source, ": file ", f, " listed twice");
    ix.files.push_back(f.get<std::string>());
  }
  MOET_CHECK(j.contains("tensors") && j["tensors"].is_object(), source,
             ": \"tensors\" must be an object");
  // The same bound as one tensor's (parse_shape), so that sums over tensors cannot overflow.
  constexpr int64_t kMaxTotalElements = int64_t{1} << 50;
  int64_t total_elements = 0;
  for (const auto& [name, t] : j["tensors"].items()) {
    const std::string ctx = source + ", tensor '" + name + "'";
    MOET_CHECK(!name.empty() && t.is_object(), ctx, ": must be an object");
    TensorEntry e;
    MOET_CHECK(t.contains("shape"), ctx, ": missing \"shape\"");
    e.shape = parse_shape(t["shape"], ctx);
    const int64_t numel = shape_numel(e.shape);
    MOET_CHECK(numel <= kMaxTotalElements - total_elements, ctx,
               ": the tensors hold more than 2^50 elements in all");
    total_elements += numel;
    if (t.contains("dtype")) {
      const std::string dt = get_string(t, "dtype", ctx);
      MOET_CHECK(dt == "F32" || dt == "BF16", ctx, ": dtype '", dt, "' is not F32 or BF16");
      e.bf16 = dt == "BF16";
    }
    MOET_CHECK(t.contains("pieces") && t["pieces"].is_array(), ctx,
               ": \"pieces\" must be an array");
    int64_t covered = 0;
    for (const auto& p : t["pieces"]) {
      MOET_CHECK(p.is_object(), ctx, ": each piece must be an object");
      PieceRef r;
      r.file = get_string(p, "file", ctx);
      MOET_CHECK(files.count(r.file), ctx, ": piece file '", r.file, "' is not in \"files\"");
      r.key = get_string(p, "key", ctx);
      r.begin = get_count(p, "begin", ctx);
      r.n = get_count(p, "n", ctx);
      r.crc = parse_crc32c_string(get_string(p, "crc", ctx), ctx);
      MOET_CHECK(r.begin == covered && r.n > 0 && r.n <= numel - r.begin, ctx, ": piece [", r.begin,
                 ", +", r.n, ") does not continue the pieces before it at ", covered, " inside ",
                 numel, " elements");
      covered += r.n;
      e.pieces.push_back(std::move(r));
    }
    MOET_CHECK(covered == numel, ctx, ": pieces cover ", covered, " of ", numel, " elements");
    ix.tensors.emplace(name, std::move(e));
  }
  return ix;
}

std::string format_checkpoint_index(const CheckpointIndex& ix) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = CheckpointIndex::kVersion;
  j["step"] = ix.step;
  j["consumed_samples"] = ix.consumed_samples;
  j["tokens"] = ix.tokens;
  j["seed"] = ix.seed;
  j["data_cursor"] = ix.data_cursor;
  j["global_batch"] = ix.global_batch;
  j["adam_steps"] = ix.adam_steps;
  j["run"] = ix.run;
  j["model_config"] = ix.model_config;
  j["files"] = ix.files;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
  for (const auto& [name, t] : ix.tensors) {
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    for (const PieceRef& p : t.pieces)
      pieces.push_back({{"file", p.file},
                        {"key", p.key},
                        {"begin", p.begin},
                        {"n", p.n},
                        {"crc", crc32c_string(p.crc)}});
    tensors[name] = {{"shape", t.shape}};
    if (t.bf16) tensors[name]["dtype"] = "BF16";
    tensors[name]["pieces"] = pieces;
  }
  j["tensors"] = tensors;
  return j.dump(1) + "\n";
}

}  // namespace moet
