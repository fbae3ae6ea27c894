// The step metrics record and its table of fields (metrics/step_metrics.h): the JSONL line as
// written before the table existed (byte for byte), every field written and read back,
// TensorBoard's tags, and docs/metrics.md's tables against the record's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "metrics/step_metrics.h"
#include "metrics/tensorboard.h"

using namespace moet;
using M = StepMetrics;

namespace {

// Every field set by hand (not through the table), to distinct values.
StepMetrics full_sample() {
  StepMetrics m;
  m.step = 12, m.total_steps = 300, m.loss = 5.25, m.lm_loss = 5.125, m.mtp_loss = 5.5;
  m.balance_loss = 3.0625, m.z_loss = 21.5, m.eval_loss = 4.75, m.eval_loss_se = 0.0125;
  m.lr = 3e-4, m.grad_norm = 1.234, m.tokens_per_s = 12345.5, m.tflops = 0.152, m.mfu = 0.123;
  m.max_expert_load = 1.42, m.tokens = 49152, m.step_time_s = 0.52, m.data_wait_s = 0.0015;
  m.a2a_s = 0.11, m.exposed_comm_s = 0.07, m.ep_load_imbalance = 1.17, m.a2a_exposed_s = 0.03;
  m.grad_sync_s = 0.02, m.comm_bytes = 3.5e6, m.grad_sync_bytes = 1.5e6;
  m.comm_bytes_other_nodes = 2.5e5, m.tp_comm_s = 0.015625, m.tp_bytes = 7.5e5;
  m.elapsed_s = 6.25, m.eta_s = 150.5, m.peak_rss_mb = 812.5;
  m.save_s = 0.375, m.pp_run_s = 0.48, m.pp_bubble = 0.21, m.pp_bytes = 2.25e6;
  m.pp_schedule_s = 0.47, m.pp_idle_s = {0.25, 0.125}, m.pp_idle_formula_s = 0.375;
  m.pp_forward_s = 0.0625, m.pp_backward_s = 0.125, m.pp_weight_s = 0.03125;
  m.ranks = 4, m.interval_steps = 10, m.interval_loss = 5.5;
  m.interval_lm_loss = 5.375, m.interval_mtp_loss = 5.875, m.interval_step_time_s = 0.55;
  m.interval_tokens_per_s = 11000.25, m.interval_tflops = 0.145, m.interval_mfu = 0.118;
  m.expert_load_layers = {1, 3};
  m.expert_load = {{2, 6, 4}, {0, 0, 0}};
  m.expert_bias = {{0.01f, -0.01f, 0.0f}, {0.03f, -0.02f, 1e-7f}};
  m.balance_loss_layers = {1, 3};
  m.balance_loss_per_layer = {1.0625, std::nan("")};
  return m;
}

// The lines metrics_json_line wrote when it listed its fields by hand (commit 0522865).
const char* const kFullLine =
    R"({"step":12,"total_steps":300,"loss":5.25,"lm_loss":5.125,"mtp_loss":5.5,)"
    R"("balance_loss":3.0625,"z_loss":21.5,"eval_loss":4.75,"eval_loss_se":0.0125,"lr":0.0003,)"
    R"("grad_norm":1.234,"tokens_per_s":12345.5,"tflops":0.152,"mfu":0.123,)"
    R"("max_expert_load":1.42,"tokens":49152,"step_time_s":0.52,"data_wait_s":0.0015,)"
    R"("a2a_s":0.11,"exposed_comm_s":0.07,"a2a_exposed_s":0.03,"grad_sync_s":0.02,)"
    R"("comm_bytes":3500000.0,"grad_sync_bytes":1500000.0,"comm_bytes_other_nodes":250000.0,)"
    R"("tp_comm_s":0.015625,"tp_bytes":750000.0,)"
    R"("ep_load_imbalance":1.17,"elapsed_s":6.25,"eta_s":150.5,"peak_rss_mb":812.5,)"
    R"("save_s":0.375,"pp_run_s":0.48,"pp_bubble":0.21,"pp_bytes":2250000.0,)"
    R"("pp_schedule_s":0.47,"pp_idle_s":[0.25,0.125],"pp_idle_formula_s":0.375,)"
    R"("pp_forward_s":0.0625,"pp_backward_s":0.125,"pp_weight_s":0.03125,"interval_steps":10,"interval_loss":5.5,"interval_lm_loss":5.375,)"
    R"("interval_mtp_loss":5.875,"interval_step_time_s":0.55,"interval_tokens_per_s":11000.25,)"
    R"("interval_tflops":0.145,"interval_mfu":0.118,"balance_loss_layers":[1,3],)"
    R"("balance_loss_per_layer":[1.0625,null],"expert_load_layers":[1,3],)"
    R"("expert_load":[[2,6,4],[0,0,0]],"expert_load_imbalance":[1.5,null],)"
    R"("expert_bias":[[0.01,-0.01,0.0],[0.03,-0.02,1e-07]]})";
const char* const kBareLine =
    R"({"step":0,"loss":null,"lr":null,"grad_norm":null,"tokens_per_s":null,"tflops":null,)"
    R"("mfu":null,"max_expert_load":null,"tokens":0})";

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Every member equal (NaN equals NaN), through the table; the first difference named.
std::string first_difference(const StepMetrics& a, const StepMetrics& b) {
  for (const MetricField& f : kStepMetricFields) {
    bool eq = true;
    if (const auto* p = std::get_if<double M::*>(&f.member)) {
      eq = same(a.**p, b.**p);
    } else if (const auto* p = std::get_if<std::vector<double> M::*>(&f.member)) {
      eq = (a.**p).size() == (b.**p).size();
      for (size_t i = 0; eq && i < (a.**p).size(); ++i) eq = same((a.**p)[i], (b.**p)[i]);
    } else if (!std::holds_alternative<DerivedPerLayer>(f.member)) {
      eq = std::visit(
          [&](auto p) {
            if constexpr (std::is_member_object_pointer_v<decltype(p)>) return a.*p == b.*p;
            return true;
          },
          f.member);
    }
    if (!eq) return f.key;
  }
  return "";
}

// Each field through the table to a value no other field has (the i-th row's).
StepMetrics distinct_sample() {
  StepMetrics m;
  for (size_t i = 0; i < std::size(kStepMetricFields); ++i) {
    const auto n = int64_t(i);
    std::visit(
        [&](auto p) {
          using T = decltype(p);
          if constexpr (std::is_same_v<T, int64_t M::*>) m.*p = 1000 + n;
          if constexpr (std::is_same_v<T, int M::*>) m.*p = 2 + int(n);
          if constexpr (std::is_same_v<T, double M::*>) m.*p = 1.0 / double(n + 3);
          if constexpr (std::is_same_v<T, std::vector<int64_t> M::*>) m.*p = {n, n + 100};
          if constexpr (std::is_same_v<T, std::vector<double> M::*>)
            m.*p = {1.0 / double(n + 7), std::nan("")};
          if constexpr (std::is_same_v<T, std::vector<std::vector<int64_t>> M::*>)
            m.*p = {{n, 1, 2}, {0, 0, 0}};
          if constexpr (std::is_same_v<T, std::vector<std::vector<float>> M::*>)
            m.*p = {{0.03f, -1e-7f, float(1.0 / double(n + 3))}, {3.4e38f, -0.0f, 1.5f}};
        },
        kStepMetricFields[i].member);
  }
  return m;
}

// docs/metrics.md's table whose header line starts with `header`: its rows' cells, trimmed.
std::vector<std::vector<std::string>> doc_table(const std::string& header) {
  std::ifstream in(std::string(MOET_SOURCE_DIR) + "/docs/metrics.md");
  EXPECT_TRUE(in.good()) << "docs/metrics.md";
  std::vector<std::vector<std::string>> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!inside) {
      inside = line.rfind(header, 0) == 0;
      if (inside) std::getline(in, line);  // the | --- | line
      continue;
    }
    if (line.empty() || line[0] != '|') break;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string cell; std::getline(ss, cell, '|');) {
      const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    rows.push_back(cells);
  }
  EXPECT_FALSE(rows.empty()) << "no table '" << header << "' in docs/metrics.md";
  return rows;
}

std::vector<std::string> backticked(const std::string& text) {
  std::vector<std::string> out;
  for (size_t b = text.find('`'); b != std::string::npos; b = text.find('`', b + 1)) {
    const size_t e = text.find('`', b + 1);
    if (e == std::string::npos) break;
    out.push_back(text.substr(b + 1, e - b - 1));
    b = e;
  }
  return out;
}

// A docs cell says `want` if it is `want` or begins with it followed by ":", "," or " (".
bool says(const std::string& cell, const std::string& want) {
  if (cell.rfind(want, 0) != 0) return false;
  const std::string rest = cell.substr(want.size());
  return rest.empty() || rest[0] == ':' || rest[0] == ',' || rest.rfind(" (", 0) == 0;
}

const MetricField* field_named(const std::string& key) {
  for (const MetricField& f : kStepMetricFields)
    if (key == f.key) return &f;
  return nullptr;
}

bool is_histogram(const MetricField& f) {
  return std::holds_alternative<std::vector<std::vector<int64_t>> M::*>(f.member) ||
         std::holds_alternative<std::vector<std::vector<float>> M::*>(f.member);
}

}  // namespace

TEST(StepMetrics, JsonLineIsByteForByteTheHandWrittenOnes) {
  EXPECT_EQ(metrics_json_line(full_sample()), kFullLine);
  EXPECT_EQ(metrics_json_line(StepMetrics{}), kBareLine);
  // groups are written only when their condition holds, whatever their fields hold
  StepMetrics m = full_sample();
  m.interval_steps = 0, m.balance_loss_per_layer.clear(), m.expert_load.clear();
  const auto j = nlohmann::json::parse(metrics_json_line(m));
  for (const char* key : {"interval_steps", "interval_loss", "balance_loss_layers",
                          "expert_load_layers", "expert_load_imbalance", "expert_bias"})
    EXPECT_FALSE(j.contains(key)) << key;
  m = full_sample();
  m.expert_bias.clear(), m.total_steps = 0, m.loss = StepMetrics::kNone, m.lr = INFINITY;
  const auto k = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_FALSE(k.contains("expert_bias"));
  EXPECT_FALSE(k.contains("total_steps"));
  EXPECT_TRUE(k["loss"].is_null());
  EXPECT_TRUE(k["lr"].is_null());
}

TEST(StepMetrics, EveryFieldRoundTripsThroughTheJsonLine) {
  for (const StepMetrics& m : {full_sample(), distinct_sample()}) {
    const std::string line = metrics_json_line(m);
    const auto j = nlohmann::json::parse(line);
    for (const MetricField& f : kStepMetricFields)
      EXPECT_EQ(j.contains(f.key), f.written != Written::kNever) << f.key << " in " << line;
    StepMetrics back = step_metrics_from_json(j);
    // what the JSONL does not hold: the progress line's world size
    EXPECT_EQ(back.ranks, 1);
    back.ranks = m.ranks;
    EXPECT_EQ(first_difference(m, back), "") << line;
    EXPECT_EQ(metrics_json_line(back), line);
    // the computed field is the loads' max / mean
    ASSERT_EQ(j["expert_load_imbalance"].size(), m.expert_load.size());
    for (size_t i = 0; i < m.expert_load.size(); ++i) {
      const double r = expert_load_imbalance(m.expert_load[i]);
      if (std::isfinite(r))
        EXPECT_EQ(j["expert_load_imbalance"][i].get<double>(), r);
      else
        EXPECT_TRUE(j["expert_load_imbalance"][i].is_null());
    }
  }
  // distinct: no two fields of the distinct sample's line hold the same value
  const auto j = nlohmann::json::parse(metrics_json_line(distinct_sample()));
  std::map<std::string, std::string> seen;
  for (const auto& [key, v] : j.items())
    EXPECT_TRUE(seen.emplace(v.dump(), key).second) << key << " and " << seen[v.dump()];
  // unmeasured fields come back as not measured; a bad value is one line naming the field
  const StepMetrics bare = step_metrics_from_json(nlohmann::json::parse(kBareLine));
  EXPECT_EQ(first_difference(bare, StepMetrics{}), "");
  EXPECT_THROW(step_metrics_from_json(nlohmann::json::parse(R"({"step":"x"})")), Error);
}

TEST(StepMetrics, TensorBoardTagsAreTheTables) {
  const StepMetrics m = full_sample();
  std::set<std::string> want, got;
  for (const MetricField& f : kStepMetricFields) {
    if (!f.tb_tag || is_histogram(f)) continue;
    std::string tag = f.tb_tag;
    if (tag.size() > 2 && tag.compare(tag.size() - 2, 2, "_L") == 0) {
      // per layer: the layers with a value (layer 3's balance loss is NaN, its load is 0)
      want.insert(tag.substr(0, tag.size() - 1) + "1");
    } else {
      want.insert(tag);
    }
  }
  for (const auto& [tag, v] : tensorboard_scalars(m)) EXPECT_TRUE(got.insert(tag).second) << tag;
  EXPECT_EQ(got, want);
}

// docs/metrics.md's glossary lists every JSONL field once, with the record's unit and scope;
// its TensorBoard table pairs every tag with the record's field; its list of keys written as
// null are the record's.
TEST(StepMetrics, DocsTablesAreTheRecords) {
  std::map<std::string, int> documented;
  for (const auto& cells : doc_table("| JSONL field |")) {
    ASSERT_EQ(cells.size(), 5u) << cells[0];
    const std::vector<std::string> keys = backticked(cells[0]);
    std::vector<const MetricField*> fields;
    for (const std::string& key : keys) {
      const MetricField* f = field_named(key);
      EXPECT_TRUE(f && f->written != Written::kNever)
          << "docs/metrics.md documents `" << key << "`, not a field of the JSONL record";
      if (f) fields.push_back(f);
      ++documented[key];
    }
    // the unit and scope cells: one for all the row's fields, or one each, comma-separated
    for (int col : {3, 4}) {
      std::vector<std::string> parts;
      std::stringstream ss(cells[col]);
      for (std::string p; std::getline(ss, p, ',');) parts.push_back(p.substr(p[0] == ' '));
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string& cell =
            fields.size() > 1 && parts.size() == fields.size() ? parts[i] : cells[col];
        const std::string want = col == 3 ? fields[i]->unit : scope_name(fields[i]->scope);
        EXPECT_TRUE(says(cell, want))
            << "docs/metrics.md: `" << fields[i]->key << "`'s " << (col == 3 ? "unit" : "scope")
            << " is '" << cell << "', the record's '" << want << "'";
      }
    }
  }
  for (const MetricField& f : kStepMetricFields)
    if (f.written != Written::kNever) {
      EXPECT_EQ(documented[f.key], 1) << "`" << f.key << "` in docs/metrics.md's glossary";
    }

  std::set<std::pair<std::string, std::string>> doc_tags, tags;
  for (const auto& cells : doc_table("| TensorBoard tag |")) {
    ASSERT_GE(cells.size(), 2u);
    const auto tag = backticked(cells[0]), field = backticked(cells[1]);
    ASSERT_FALSE(tag.empty() || field.empty()) << cells[0];
    doc_tags.emplace(tag[0], field[0].substr(0, field[0].find('[')));
  }
  std::ifstream in(std::string(MOET_SOURCE_DIR) + "/docs/metrics.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const MetricField& f : kStepMetricFields) {
    if (!f.tb_tag) continue;
    if (is_histogram(f))  // the histograms are described below the table
      EXPECT_NE(doc.find("`" + std::string(f.tb_tag) + "`"), std::string::npos) << f.tb_tag;
    else
      tags.emplace(f.tb_tag, f.key);
  }
  for (const auto& [tag, key] : tags)
    EXPECT_TRUE(doc_tags.count({tag, key}))
        << "docs/metrics.md's TensorBoard table lacks `" << tag << "` | `" << key << "`";
  for (const auto& [tag, key] : doc_tags)
    EXPECT_TRUE(tags.count({tag, key})) << "docs/metrics.md's TensorBoard table has `" << tag
                                        << "` | `" << key << "`, not the record's (its tb_tag)";

  const std::string intro = "(or `null` for ";
  const size_t nulls = doc.find(intro) + intro.size();
  ASSERT_NE(nulls, std::string::npos + intro.size()) << "docs/metrics.md: " << intro;
  const auto listed = backticked(doc.substr(nulls, doc.find(')', nulls) - nulls));
  std::set<std::string> null_keys;
  for (const MetricField& f : kStepMetricFields)
    if (f.written == Written::kNullIfNone) null_keys.insert(f.key);
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), null_keys);
}
