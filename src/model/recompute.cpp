#include "model/recompute.h"

#include <algorithm>

#include "core/choices.h"
#include "core/error.h"

namespace moet {

const std::vector<std::pair<std::string, RecomputeModule>>& recompute_module_choices() {
  static const std::vector<std::pair<std::string, RecomputeModule>> c = {
      {"core_attn", RecomputeModule::kCoreAttn},
      {"mla_up_proj", RecomputeModule::kMlaUpProj},
      {"moe_act", RecomputeModule::kMoeAct},
      {"layernorm", RecomputeModule::kLayernorm},
      {"mlp", RecomputeModule::kMlp},
      {"moe", RecomputeModule::kMoe},
      {"shared_experts", RecomputeModule::kSharedExperts}};
  return c;
}

const std::vector<std::pair<std::string, RecomputeGranularity>>& recompute_granularity_choices() {
  static const std::vector<std::pair<std::string, RecomputeGranularity>> c = {
      {"none", RecomputeGranularity::kNone},
      {"selective", RecomputeGranularity::kSelective},
      {"full", RecomputeGranularity::kFull}};
  return c;
}

const std::vector<std::pair<std::string, RecomputeMethod>>& recompute_method_choices() {
  static const std::vector<std::pair<std::string, RecomputeMethod>> c = {
      {"uniform", RecomputeMethod::kUniform}, {"block", RecomputeMethod::kBlock}};
  return c;
}

const char* recompute_module_name(RecomputeModule m) {
  return choice_name(recompute_module_choices(), m);
}
const char* recompute_granularity_name(RecomputeGranularity g) {
  return choice_name(recompute_granularity_choices(), g);
}
const char* recompute_method_name(RecomputeMethod m) {
  return choice_name(recompute_method_choices(), m);
}

std::vector<RecomputeModule> RecomputeModules::list() const {
  std::vector<RecomputeModule> out;
  for (const auto& [name, m] : recompute_module_choices())
    if (has(m)) out.push_back(m);
  return out;
}

std::string RecomputeModules::names() const {
  std::string s;
  for (RecomputeModule m : list()) {
    if (!s.empty()) s += ' ';
    s += recompute_module_name(m);
  }
  return s;
}

RecomputeModules moe_recipe_recompute_modules() {
  RecomputeModules m;
  m.add(RecomputeModule::kMlaUpProj);
  m.add(RecomputeModule::kMoeAct);
  m.add(RecomputeModule::kLayernorm);
  return m;
}

int64_t RecomputePlan::group_start(int64_t i, int64_t n) const {
  MOET_ASSERT(0 <= i && i < n);
  if (granularity != RecomputeGranularity::kFull) return -1;
  if (method == RecomputeMethod::kBlock) return i < num_layers ? i : -1;
  return i - i % num_layers;
}

std::string RecomputePlan::describe() const {
  switch (granularity) {
    case RecomputeGranularity::kNone:
      return "none";
    case RecomputeGranularity::kSelective:
      return "selective (" + modules.names() + ")";
    case RecomputeGranularity::kFull:
      return str(
          "full (", recompute_method_name(method), ", ", num_layers,
          method == RecomputeMethod::kUniform ? " layer(s) per group)" : " layer(s) per stage)");
  }
  return "?";
}

void RecomputeRegion::count_module() {
  if (current_ >= 0) bytes_[current_] += int64_t(arena_.used() - mark_);
  mark_ = arena_.used();
}

void RecomputeRegion::close_layer() {
  count_module();
  total_ += int64_t(arena_.used());
  region_ = std::max(region_, int64_t(arena_.used()));
}

void RecomputeRegion::start_layer() {
  close_layer();
  arena_.reset();
  current_ = -1;
  mark_ = 0;
}

Arena& RecomputeRegion::for_module(RecomputeModule m) {
  count_module();
  current_ = int(m);
  return arena_;
}

void RecomputeRegion::finish() {
  close_layer();
  current_ = -1;
  // a planning arena reports the largest layer, not the last
  if (arena_.is_planning()) {
    arena_.reset();
    arena_.alloc(DType::F32, {region_ / int64_t(sizeof(float))});
  }
}

}  // namespace moet
