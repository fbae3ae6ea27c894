#include "train/train_options.h"

#include "core/choices.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "train/option_fields.h"

namespace moet {

const std::vector<std::pair<std::string, OverlapMode>>& overlap_choices() {
  static const std::vector<std::pair<std::string, OverlapMode>> c = {
      {"auto", OverlapMode::kAuto}, {"on", OverlapMode::kOn}, {"off", OverlapMode::kOff}};
  return c;
}

const std::vector<std::pair<std::string, DispatcherKind>>& dispatcher_choices() {
  static const std::vector<std::pair<std::string, DispatcherKind>> c = {
      {"alltoall", DispatcherKind::kAllToAll}, {"allgather", DispatcherKind::kAllGather}};
  return c;
}

const std::vector<std::pair<std::string, LrSchedule::Kind>>& schedule_choices() {
  static const std::vector<std::pair<std::string, LrSchedule::Kind>> c = {
      {"cosine", LrSchedule::Kind::Cosine}, {"constant", LrSchedule::Kind::Constant}};
  return c;
}

const std::vector<std::pair<std::string, std::optional<Recipe>>>& precision_choices() {
  static const std::vector<std::pair<std::string, std::optional<Recipe>>> c = [] {
    std::vector<std::pair<std::string, std::optional<Recipe>>> v = {{"auto", std::nullopt}};
    for (const RecipeTraits& r : kRecipes) v.emplace_back(r.name, r.recipe);
    return v;
  }();
  return c;
}

const char* overlap_name(OverlapMode m) { return choice_name(overlap_choices(), m); }
const char* dispatcher_name(DispatcherKind d) { return choice_name(dispatcher_choices(), d); }
const char* schedule_name(LrSchedule::Kind k) { return choice_name(schedule_choices(), k); }

const std::vector<std::pair<std::string, MomentDtype>>& moment_dtype_choices() {
  static const std::vector<std::pair<std::string, MomentDtype>> c = {{"fp32", MomentDtype::kFp32},
                                                                     {"bf16", MomentDtype::kBf16}};
  return c;
}

MomentDtypes moment_dtypes(const OptimizerOptions& o) {
  auto dtype = [](MomentDtype d) { return d == MomentDtype::kBf16 ? DType::BF16 : DType::F32; };
  return {dtype(o.exp_avg_dtype), dtype(o.exp_avg_sq_dtype)};
}

std::string PrecisionOptions::name() const { return recipe ? recipe_name(*recipe) : "auto"; }

RecomputePlan RecomputeOptions::plan() const {
  RecomputePlan p;
  p.granularity = granularity;
  if (granularity == RecomputeGranularity::kSelective) {
    for (RecomputeModule m : modules) p.modules.add(m);
    if (p.modules.empty()) p.modules.add(RecomputeModule::kCoreAttn);
  }
  p.method = method.value_or(RecomputeMethod::kUniform);
  p.num_layers = num_layers.value_or(1);
  return p;
}

nlohmann::json to_json(const TrainOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  for (const OptionField& f : train_option_fields())
    (*f.group ? j[f.group][f.key] : j[f.key]) = option_json(f, o);
  return j;
}

TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& where) {
  MOET_CHECK(j.is_object(), where, ": options is not an object");
  TrainOptions o;
  for (const OptionField& f : train_option_fields()) {
    const nlohmann::json* group = &j;
    if (*f.group) {
      if (!j.contains(f.group)) continue;
      group = &j[f.group];
      MOET_CHECK(group->is_object(), where, ": options.", f.group, " is not an object");
    }
    if (group->contains(f.key)) set_option_from_json(f, o, (*group)[f.key], where);
  }
  return o;
}

}  // namespace moet
