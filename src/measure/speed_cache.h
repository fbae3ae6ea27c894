// What this machine measured once and later runs read back: GEMM speeds at a model's shapes
// (gemm_choice.h) and the GEMM peaks MFU divides by (gemm_peak.h), in moet's cache directory
// (gemm-speeds.json), keyed by what the speed depends on: the CPU model, the oneDNN version and
// the thread count (machine_key()), and what was measured.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace moet {

// "AMD EPYC | oneDNN 2.6.3 | 2 threads" (the thread count of ops::num_threads()).
std::string machine_key();

// The cached value of `key`, if any (a missing or damaged cache is empty).
std::optional<nlohmann::json> cached_speed(const std::string& key);
// Stores `value` under `key` (a cache that cannot be written only costs the next run a
// measurement).
void remember_speed(const std::string& key, const nlohmann::json& value);

}  // namespace moet
