#include "metrics/step_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/overloaded.h"

namespace moet {
namespace {

using M = StepMetrics;
using json = nlohmann::ordered_json;

// How many members StepMetrics (an aggregate) has: the most initializers T{...} takes.
struct AnyValue {
  template <class T>
  operator T() const;  // NOLINT: converts to any member's type, never called
};
template <class T, size_t... I>
constexpr bool takes_initializers(std::index_sequence<I...>) {
  return requires { T{(void(I), AnyValue{})...}; };
}
template <class T, size_t N = 0>
constexpr size_t member_count() {
  if constexpr (!takes_initializers<T>(std::make_index_sequence<N + 1>{}))
    return N;
  else
    return member_count<T, N + 1>();
}

constexpr size_t rows_with_a_member() {
  size_t n = 0;
  for (const MetricField& f : kStepMetricFields)
    n += !std::holds_alternative<DerivedPerLayer>(f.member);
  return n;
}

constexpr bool keys_and_members_unique() {
  for (size_t a = 0; a < std::size(kStepMetricFields); ++a)
    for (size_t b = a + 1; b < std::size(kStepMetricFields); ++b)
      if (std::string_view(kStepMetricFields[a].key) == kStepMetricFields[b].key ||
          kStepMetricFields[a].member == kStepMetricFields[b].member)
        return false;
  return true;
}

static_assert(member_count<StepMetrics>() == rows_with_a_member(),
              "every member of StepMetrics has its row in kStepMetricFields");
static_assert(keys_and_members_unique(), "a key or member twice in kStepMetricFields");

// A float32 as the double of its shortest decimal ("0.03", not 0.029999999329447746): the
// JSON reads as written and its float32 is the value.
double shortest(float v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, res.ptr).c_str(), nullptr);
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json per_layer(const std::vector<double>& values) {
  json a = json::array();
  for (double v : values) a.push_back(number_or_null(v));
  return a;
}

// The field's JSON value (null: a measurement not measured).
json value_of(const StepMetrics& m, const MetricField& f) {
  return std::visit(
      Overloaded{[&](int64_t M::*p) { return json(m.*p); }, [&](int M::*p) { return json(m.*p); },
                 [&](double M::*p) { return number_or_null(m.*p); },
                 [&](std::vector<int64_t> M::*p) { return json(m.*p); },
                 [&](std::vector<double> M::*p) { return per_layer(m.*p); },
                 [&](std::vector<std::vector<int64_t>> M::*p) { return json(m.*p); },
                 [&](std::vector<std::vector<float>> M::*p) {
                   json rows = json::array();
                   for (const std::vector<float>& row : m.*p) {
                     json r = json::array();
                     for (float v : row) r.push_back(shortest(v));
                     rows.push_back(std::move(r));
                   }
                   return rows;
                 },
                 [&](DerivedPerLayer derive) { return per_layer(derive(m)); }},
      f.member);
}

bool group_written(const StepMetrics& m, MetricGroup g) {
  switch (g) {
    case MetricGroup::kStep:
      return true;
    case MetricGroup::kInterval:
      return m.interval_steps > 0;
    case MetricGroup::kBalancePerLayer:
      return !m.balance_loss_per_layer.empty();
    case MetricGroup::kExpertLoad:
      return !m.expert_load.empty();
  }
  return false;
}

// Whether a field whose group is written goes into the line with this value.
bool value_written(const json& v, Written w) {
  switch (w) {
    case Written::kAlways:
    case Written::kNullIfNone:
      return true;
    case Written::kIfPositive:
      return v.is_number_integer() && v.get<int64_t>() > 0;
    case Written::kIfMeasured:
      return !v.is_null();
    case Written::kIfAny:
      return !v.empty();
    case Written::kNever:
      return false;
  }
  return false;
}

double number(const nlohmann::json& v) {
  return v.is_number() ? v.get<double>() : StepMetrics::kNone;  // null: not measured
}

void read_field(StepMetrics& m, const MetricField& f, const nlohmann::json& v) {
  std::visit(
      Overloaded{[&](int64_t M::*p) { m.*p = v.get<int64_t>(); },
                 [&](int M::*p) { m.*p = v.get<int>(); }, [&](double M::*p) { m.*p = number(v); },
                 [&](std::vector<int64_t> M::*p) { m.*p = v.get<std::vector<int64_t>>(); },
                 [&](std::vector<double> M::*p) {
                   (m.*p).clear();
                   for (const nlohmann::json& e : v) (m.*p).push_back(number(e));
                 },
                 [&](std::vector<std::vector<int64_t>> M::*p) {
                   m.*p = v.get<std::vector<std::vector<int64_t>>>();
                 },
                 [&](std::vector<std::vector<float>> M::*p) {
                   m.*p = v.get<std::vector<std::vector<float>>>();
                 },
                 [](DerivedPerLayer) {}},  // computed from the other fields
      f.member);
}

}  // namespace

const char* scope_name(MetricScope s) {
  // in MetricScope's order
  static constexpr const char* kNames[] = {
      "—", "global", "rank 0", "per rank", "all ranks", "rank 0's EP group",
  };
  static_assert(std::size(kNames) == size_t(MetricScope::kRank0EpGroup) + 1, "MetricScope's order");
  return kNames[size_t(s)];
}

double expert_load_imbalance(const std::vector<int64_t>& load_E) {
  double sum = 0, mx = 0;
  for (int64_t l : load_E) sum += double(l), mx = std::max(mx, double(l));
  if (load_E.empty() || sum <= 0) return StepMetrics::kNone;
  return mx / (sum / double(load_E.size()));
}

std::vector<double> expert_load_imbalances(const StepMetrics& m) {
  std::vector<double> out;
  for (const std::vector<int64_t>& load : m.expert_load) out.push_back(expert_load_imbalance(load));
  return out;
}

bool metric_written(const StepMetrics& m, const MetricField& f) {
  return f.written != Written::kNever && group_written(m, f.group) &&
         value_written(value_of(m, f), f.written);
}

const std::vector<int64_t>& metric_layers(const StepMetrics& m, const MetricField& f) {
  static const std::vector<int64_t> kNoLayers;
  switch (f.group) {
    case MetricGroup::kBalancePerLayer:
      return m.balance_loss_layers;
    case MetricGroup::kExpertLoad:
      return m.expert_load_layers;
    default:
      return kNoLayers;
  }
}

std::string metrics_json_line(const StepMetrics& m) {
  json j = json::object();
  for (const MetricField& f : kStepMetricFields) {
    if (f.written == Written::kNever || !group_written(m, f.group)) continue;
    json v = value_of(m, f);
    if (value_written(v, f.written)) j[f.key] = std::move(v);
  }
  return j.dump();
}

StepMetrics step_metrics_from_json(const nlohmann::json& j) {
  MOET_CHECK(j.is_object(), "a metrics record is a JSON object, not ", j.type_name());
  StepMetrics m;
  for (const MetricField& f : kStepMetricFields) {
    const auto it = j.find(f.key);
    if (it == j.end()) continue;
    try {
      read_field(m, f, *it);
    } catch (const nlohmann::json::exception& e) {
      MOET_FAIL("metrics record: '", f.key, "' is ", it->dump(), ": ", e.what());
    }
  }
  return m;
}

}  // namespace moet
