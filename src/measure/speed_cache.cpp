#include "measure/speed_cache.h"

#include <dnnl.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/file_io.h"
#include "kernels/ops.h"

namespace moet {

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

std::string cache_path() {
  const std::string dir = user_cache_dir();
  return dir.empty() ? "" : dir + "/gemm-speeds.json";
}

nlohmann::json read_cache(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(read_text_file(path));
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const std::exception&) {
    return nlohmann::json::object();  // a damaged cache is measured again
  }
}

}  // namespace

std::string machine_key() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream key;
  key << cpu_model_name() << " | oneDNN " << v->major << "." << v->minor << "." << v->patch << " | "
      << ops::num_threads() << " threads";
  return key.str();
}

std::optional<nlohmann::json> cached_speed(const std::string& key) {
  const nlohmann::json cache = read_cache(cache_path());
  if (!cache.contains(key)) return std::nullopt;
  return cache[key];
}

void remember_speed(const std::string& key, const nlohmann::json& value) {
  const std::string path = cache_path();
  if (path.empty()) return;
  nlohmann::json cache = read_cache(path);
  cache[key] = value;
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    write_file_atomically(path, cache.dump(2) + "\n", true);
  } catch (const std::exception&) {
    // a cache that cannot be written only costs the next run the measurement
  }
}

}  // namespace moet
