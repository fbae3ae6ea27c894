#include "sim/system_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "model/recipe.h"

#ifndef MOET_SOURCE_DIR
#define MOET_SOURCE_DIR "."
#endif

namespace moet::sim {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

double number(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    throw Error(str(where, ": field '", key, "' is missing or not a number"));
  return it->get<double>();
}

double fraction(const json& j, const char* key, double fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number()) throw Error(str(where, ": field '", key, "' is not a number"));
  const double v = it->get<double>();
  if (!(v >= 0 && v <= 1))
    throw Error(str(where, ": field '", key, "' = ", v, " is not a fraction in [0, 1]"));
  return v;
}

std::map<std::string, double> per_precision(const json& j, const char* key,
                                            const std::string& where, bool is_fraction) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object() || it->empty())
    throw Error(str(where, ": field '", key, "' must be an object {precision: value}"));
  std::map<std::string, double> out;
  for (auto& [p, v] : it->items()) {
    if (!v.is_number() || v.get<double>() <= 0 || (is_fraction && v.get<double>() > 1))
      throw Error(str(where, ": ", key, ".", p, " must be a positive ",
                      is_fraction ? "fraction" : "number"));
    if (!out.emplace(precision_name(p), v.get<double>()).second)
      throw Error(str(where, ": ", key, " gives ", precision_name(p), " twice (", p,
                      " is its former name)"));
  }
  return out;
}

// efficiency.a2a_nvlink_by_peers: {"peers": [...], "dispatch_fp8": [...], "dispatch_bf16": [...],
// "combine": [...]}, peers ascending from 2, each column one fraction per entry.
A2aByPeers a2a_by_peers(const json& e, const std::string& where) {
  A2aByPeers t;
  auto it = e.find("a2a_nvlink_by_peers");
  if (it == e.end()) return t;
  const std::string w = where + ".a2a_nvlink_by_peers";
  if (!it->is_object()) throw Error(str(w, " must be an object of equal-length arrays"));
  auto column = [&](const char* key, bool is_fraction) {
    auto c = it->find(key);
    if (c == it->end() || !c->is_array() || c->empty())
      throw Error(str(w, ": '", key, "' must be a non-empty array"));
    std::vector<double> v;
    for (auto& x : *c) {
      if (!x.is_number() || !(x.get<double>() > 0) || (is_fraction && x.get<double>() > 1))
        throw Error(str(w, ".", key, ": ", x.dump(), " is not a ",
                        is_fraction ? "fraction in (0, 1]" : "positive number"));
      v.push_back(x.get<double>());
    }
    return v;
  };
  t.peers = column("peers", false);
  t.dispatch_fp8 = column("dispatch_fp8", true);
  t.dispatch_bf16 = column("dispatch_bf16", true);
  t.combine = column("combine", true);
  const size_t n = t.peers.size();
  if (t.dispatch_fp8.size() != n || t.dispatch_bf16.size() != n || t.combine.size() != n)
    throw Error(str(w, ": peers, dispatch_fp8, dispatch_bf16 and combine differ in length"));
  for (size_t i = 0; i < n; ++i)
    if (t.peers[i] < 2 || (i > 0 && t.peers[i] <= t.peers[i - 1]))
      throw Error(str(w, ".peers must ascend from 2 (", t.peers[i], " at entry ", i, ")"));
  return t;
}

// Column `v` of a per-EP-size table whose sizes sit at log2 positions `x`, read at log2 position
// `at` (SystemSpec::a2a_nvlink_at says how).
double along_peers(const std::vector<double>& x, const std::vector<double>& v, double at) {
  const size_t n = x.size();
  if (n == 1 || at <= x.front()) return v.front();
  if (at >= x.back()) {
    const double slope = (v.back() - v.front()) / (x.back() - x.front());
    return std::max(0.5 * v.back(), v.back() + slope * (at - x.back()));
  }
  size_t i = 1;
  while (x[i] < at) ++i;
  const double u = (at - x[i - 1]) / (x[i] - x[i - 1]);
  return v[i - 1] + u * (v[i] - v[i - 1]);
}

std::vector<std::string> catalog_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(systems_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string precision_name(const std::string& name) {
  return name == "fp8" ? recipe_name(Recipe::FP8Blockwise) : name;
}

double SystemSpec::peak(ops::Format f) const {
  const std::string precision = ops::format_name(f);
  auto it = peak_tflops.find(precision);
  if (it == peak_tflops.end()) {
    std::string have;
    for (auto& [p, v] : peak_tflops) have += (have.empty() ? "" : ", ") + p;
    throw Error(str("system '", name, "' has no ", precision, " peak (it has: ", have, ")"));
  }
  return it->second;
}

double SystemSpec::gemm_max(ops::Format f) const {
  auto it = eff.gemm_max.find(ops::format_name(f));
  if (it == eff.gemm_max.end())
    throw Error(str("system '", name, "' has no GEMM efficiency for ", ops::format_name(f)));
  return it->second;
}

double SystemSpec::gemm_half_dim(ops::Format f) const {
  auto it = eff.gemm_half_dim.find(ops::format_name(f));
  if (it == eff.gemm_half_dim.end())
    throw Error(str("system '", name, "' has no GEMM half dimension for ", ops::format_name(f)));
  return it->second;
}

A2aEfficiency SystemSpec::a2a_nvlink_at(double peers) const {
  const A2aByPeers& t = eff.a2a_nvlink_by_peers;
  if (t.peers.empty()) return {eff.a2a_nvlink, eff.a2a_nvlink, eff.a2a_nvlink};
  std::vector<double> x;
  for (double p : t.peers) x.push_back(std::log2(p));
  const double at = std::log2(std::max(2.0, peers));
  return {along_peers(x, t.dispatch_fp8, at), along_peers(x, t.dispatch_bf16, at),
          along_peers(x, t.combine, at)};
}

int SystemSpec::ranks_per_domain(int gpus) const {
  for (int d = std::min(nvlink_domain, gpus); d > 1; --d)
    if (gpus % d == 0) return d;
  return 1;
}

double SystemSpec::gemm_half_dim(ops::Format f, int ranks) const {
  auto it = eff.gemm_half_dim_one_thread.find(ops::format_name(f));
  const bool one_thread = compute_shared && threads > 0 && ranks >= threads;
  if (one_thread && it != eff.gemm_half_dim_one_thread.end()) return it->second;
  return gemm_half_dim(f);
}

std::string systems_dir() {
  if (const char* env = std::getenv("MOET_SYSTEMS_DIR")) return env;
  return std::string(MOET_SOURCE_DIR) + "/configs/systems";
}

SystemSpec parse_system(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(str(where, ": not valid JSON (", e.what(), ")"));
  }
  if (!j.is_object()) throw Error(str(where, ": expected a JSON object"));
  SystemSpec s;
  s.name = j.value("name", fs::path(where).stem().string());
  s.description = j.value("description", "");
  s.peak_tflops = per_precision(j, "peak_tflops", where, false);
  s.hbm_gb = number(j, "hbm_gb", where);
  s.hbm_tbps = number(j, "hbm_tbps", where);
  s.nvlink_gbps = number(j, "nvlink_gbps", where);
  s.nvlink_domain = static_cast<int>(number(j, "nvlink_domain", where));
  s.scaleout_gbps = number(j, "scaleout_gbps", where);
  s.compute_shared = j.value("compute_shared", false);
  s.threads = j.value("threads", 0);
  s.memory_reserve_gb = j.value("memory_reserve_gb", 0.0);
  if (s.hbm_gb <= 0 || s.hbm_tbps <= 0 || s.nvlink_gbps <= 0 || s.nvlink_domain < 1 ||
      s.scaleout_gbps <= 0)
    throw Error(str(where, ": memory, bandwidths and nvlink_domain must be positive"));
  auto e = j.find("efficiency");
  if (e == j.end() || !e->is_object())
    throw Error(str(where, ": field 'efficiency' is missing (an object of measured fractions)"));
  const std::string ew = where + ": efficiency";
  Efficiency& f = s.eff;
  f.gemm_max = per_precision(*e, "gemm_max", ew, true);
  f.gemm_half_dim = per_precision(*e, "gemm_half_dim", ew, false);
  if (e->contains("gemm_half_dim_one_thread"))
    f.gemm_half_dim_one_thread = per_precision(*e, "gemm_half_dim_one_thread", ew, false);
  f.attention_fwd = fraction(*e, "attention_fwd", f.attention_fwd, ew);
  f.attention_bwd = fraction(*e, "attention_bwd", f.attention_bwd, ew);
  f.hbm = fraction(*e, "hbm", f.hbm, ew);
  f.a2a_nvlink = fraction(*e, "a2a_nvlink", f.a2a_nvlink, ew);
  f.a2a_nvlink_by_peers = a2a_by_peers(*e, ew);
  f.a2a_scaleout = fraction(*e, "a2a_scaleout", f.a2a_scaleout, ew);
  f.a2a_sm_fraction = fraction(*e, "a2a_sm_fraction", f.a2a_sm_fraction, ew);
  f.collective_nvlink = fraction(*e, "collective_nvlink", f.collective_nvlink, ew);
  f.collective_scaleout = fraction(*e, "collective_scaleout", f.collective_scaleout, ew);
  f.collective_sm_fraction = fraction(*e, "collective_sm_fraction", f.collective_sm_fraction, ew);
  f.op_overhead_us = e->value("op_overhead_us", 0.0);
  f.kernel_launch_us = e->value("kernel_launch_us", 0.0);
  f.framework_host_us = e->value("framework_host_us", 0.0);
  if (!(f.kernel_launch_us >= 0 && f.op_overhead_us >= 0 && f.framework_host_us >= 0))
    throw Error(str(ew, ": op_overhead_us, kernel_launch_us and framework_host_us must be >= 0"));
  for (auto& [p, v] : s.peak_tflops)
    if (!f.gemm_max.count(p) || !f.gemm_half_dim.count(p))
      throw Error(str(where, ": peak_tflops has ", p,
                      " but efficiency.gemm_max or efficiency.gemm_half_dim has not"));
  if (auto src = j.find("sources"); src != j.end() && src->is_object())
    for (auto& [k, v] : src->items())
      s.sources[k] = v.is_string() ? v.get<std::string>() : v.dump();
  return s;
}

SystemSpec load_system(const std::string& name_or_path) {
  std::string path = name_or_path;
  const bool is_path =
      name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".json";
  if (!is_path) path = systems_dir() + "/" + name_or_path + ".json";
  std::ifstream in(path);
  if (!in) {
    if (is_path) throw Error(str("cannot read system file '", path, "'"));
    std::string names;
    for (auto& n : catalog_names()) names += (names.empty() ? "" : ", ") + n;
    if (name_or_path == "local")
      throw Error(str("system 'local' is not calibrated yet: run `moet bench` first (it writes ",
                      path, ")"));
    throw Error(
        str("unknown system '", name_or_path, "' (catalog ", systems_dir(), ": ", names, ")"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_system(ss.str(), path);
}

std::string system_to_json(const SystemSpec& s) {
  const Efficiency& f = s.eff;
  json e = {{"gemm_max", f.gemm_max},
            {"gemm_half_dim", f.gemm_half_dim},
            {"attention_fwd", f.attention_fwd},
            {"attention_bwd", f.attention_bwd},
            {"hbm", f.hbm},
            {"a2a_nvlink", f.a2a_nvlink},
            {"a2a_scaleout", f.a2a_scaleout},
            {"a2a_sm_fraction", f.a2a_sm_fraction},
            {"collective_nvlink", f.collective_nvlink},
            {"collective_scaleout", f.collective_scaleout},
            {"collective_sm_fraction", f.collective_sm_fraction},
            {"op_overhead_us", f.op_overhead_us},
            {"kernel_launch_us", f.kernel_launch_us},
            {"framework_host_us", f.framework_host_us}};
  if (const A2aByPeers& t = f.a2a_nvlink_by_peers; !t.peers.empty())
    e["a2a_nvlink_by_peers"] = {{"peers", t.peers},
                                {"dispatch_fp8", t.dispatch_fp8},
                                {"dispatch_bf16", t.dispatch_bf16},
                                {"combine", t.combine}};
  if (!f.gemm_half_dim_one_thread.empty())
    e["gemm_half_dim_one_thread"] = f.gemm_half_dim_one_thread;
  json j = {{"name", s.name},
            {"description", s.description},
            {"peak_tflops", s.peak_tflops},
            {"hbm_gb", s.hbm_gb},
            {"hbm_tbps", s.hbm_tbps},
            {"nvlink_gbps", s.nvlink_gbps},
            {"nvlink_domain", s.nvlink_domain},
            {"scaleout_gbps", s.scaleout_gbps},
            {"compute_shared", s.compute_shared},
            {"memory_reserve_gb", s.memory_reserve_gb},
            {"efficiency", e},
            {"sources", s.sources}};
  if (s.threads > 0) j["threads"] = s.threads;
  return j.dump(2) + "\n";
}

}  // namespace moet::sim
