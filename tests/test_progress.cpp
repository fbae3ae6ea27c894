// Progress line and JSONL metrics writer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "metrics/progress.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

StepMetrics sample(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.total_steps = 1000;
  m.loss = 5.4321;
  m.lm_loss = 5.40;
  m.mtp_loss = 5.69;
  m.balance_loss = 1.01;
  m.lr = 3e-4;
  m.grad_norm = 1.234;
  m.tokens_per_s = 12345;
  m.tflops = 0.152;
  m.mfu = 0.123;
  m.max_expert_load = 1.42;
  m.tokens = 4096 * step;
  m.step_time_s = 0.52;
  m.eta_s = 3723;
  return m;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("moet_progress_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(Progress, LineHasTheFields) {
  const std::string line = format_progress_line(sample(12));
  for (const char* want : {"step   12/1000", "loss 5.4321", "lm 5.4000", "mtp 5.6900",
                           "lr 3.00e-04", "gnorm 1.234", "12.3k tok/s", "0.152 TFLOP/s",
                           "MFU 12.3%", "load max/mean 1.42", "0.52 s/step", "ETA 1:02:03"})
    EXPECT_NE(line.find(want), std::string::npos) << "missing '" << want << "' in: " << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);

  StepMetrics bare;  // nothing measured: no crash, no "nan" fields besides the loss
  bare.step = 1;
  const std::string b = format_progress_line(bare);
  EXPECT_NE(b.find("step 1"), std::string::npos) << b;
  EXPECT_EQ(b.find("ETA"), std::string::npos) << b;
  EXPECT_EQ(b.find("tok/s"), std::string::npos) << b;
}

TEST(Progress, LabelsGlobalAndPerRankRatesUnderMpi) {
  StepMetrics m = sample(12);
  m.ranks = 2;
  m.a2a_s = 0.1, m.exposed_comm_s = 0.05, m.grad_sync_s = 0.02;
  m.comm_bytes = 3.5e6, m.grad_sync_bytes = 1.5e6;
  const std::string line = format_progress_line(m);
  for (const char* want :
       {"12.3k tok/s (global)", "0.152 TFLOP/s/rank", "3.5 MB sent", "(1.5 MB gradients)"})
    EXPECT_NE(line.find(want), std::string::npos) << "missing '" << want << "' in: " << line;
  EXPECT_EQ(format_progress_line(sample(12)).find("(global)"), std::string::npos);
  // --pp: the bytes between stages are shown, not a bare "0.0 MB sent"
  m.pp_bytes = 2.25e6;
  const std::string pp = format_progress_line(m);
  EXPECT_NE(pp.find("(1.5 MB gradients, 2.2 MB between pipeline stages (all ranks))"),
            std::string::npos)
      << pp;
  // each pipeline rank's idle time, beside the schedule's formula when it has one
  m.pp_idle_s = {0.3, 0.125};
  EXPECT_NE(format_progress_line(m).find(" | pp idle 0.300 0.125 s |"), std::string::npos)
      << format_progress_line(m);
  m.pp_idle_formula_s = 0.28;
  EXPECT_NE(format_progress_line(m).find(" | pp idle 0.300 0.125 s (formula 0.280 s)"),
            std::string::npos)
      << format_progress_line(m);
  m.pp_idle_s.assign(16, 0.5);
  m.pp_idle_s[3] = 0.25;
  EXPECT_NE(format_progress_line(m).find(" | pp idle 0.250–0.500 s (formula"), std::string::npos)
      << format_progress_line(m);
}

TEST(Progress, IntervalMeansAreTheStepsMeansAndRatesOverTheInterval) {
  IntervalMeans interval;
  const double loss[3] = {6.0, 5.0, 4.0}, secs[3] = {1.0, 2.0, 3.0}, tps[3] = {300, 150, 100};
  StepMetrics m;
  for (int i = 0; i < 3; ++i) {
    m = sample(10 + i);
    m.loss = loss[i], m.lm_loss = loss[i] - 0.5, m.mtp_loss = StepMetrics::kNone;
    m.step_time_s = secs[i], m.tokens_per_s = tps[i];
    m.tflops = tps[i] * 1e-3, m.mfu = tps[i] * 1e-4;
    interval.add(m);
  }
  EXPECT_EQ(interval.steps(), 3);
  interval.fill(m);
  EXPECT_EQ(interval.steps(), 0);  // a new interval starts
  EXPECT_EQ(m.interval_steps, 3);
  EXPECT_DOUBLE_EQ(m.interval_loss, 5.0);
  EXPECT_DOUBLE_EQ(m.interval_lm_loss, 4.5);
  EXPECT_TRUE(std::isnan(m.interval_mtp_loss));  // no MTP: left out
  EXPECT_DOUBLE_EQ(m.interval_step_time_s, 2.0);
  // 300 + 300 + 300 tokens in 6 s
  EXPECT_DOUBLE_EQ(m.interval_tokens_per_s, 150.0);
  EXPECT_DOUBLE_EQ(m.interval_tflops, 0.15);
  EXPECT_DOUBLE_EQ(m.interval_mfu, 0.015);
  const std::string line = format_progress_line(m);
  for (const char* want : {"mean of 3 steps: loss 5.0000 (lm 4.5000)", "150 tok/s", "0.150 TFLOP/s",
                           "MFU 1.5%", "2.00 s/step", "step 12: loss 4.0000"})
    EXPECT_NE(line.find(want), std::string::npos) << "missing '" << want << "' in: " << line;
  const nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j["interval_steps"], 3);
  EXPECT_DOUBLE_EQ(j["interval_loss"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j["interval_tokens_per_s"].get<double>(), 150.0);
  EXPECT_FALSE(j.contains("interval_mtp_loss"));
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), 3.0);  // the step's own values stay
  // a step that prints nothing carries no interval fields
  EXPECT_FALSE(nlohmann::json::parse(metrics_json_line(sample(1))).contains("interval_steps"));
  StepMetrics none = sample(1);
  interval.fill(none);  // nothing added since the last fill
  EXPECT_EQ(none.interval_steps, 0);
}

TEST(Progress, Hms) {
  EXPECT_EQ(format_hms(0), "0:00:00");
  EXPECT_EQ(format_hms(59.6), "0:01:00");
  EXPECT_EQ(format_hms(3723), "1:02:03");
  EXPECT_EQ(format_hms(100 * 3600 + 5), "100:00:05");
  EXPECT_EQ(format_hms(-1), "-:--:--");
  EXPECT_EQ(format_hms(StepMetrics::kNone), "-:--:--");
}

TEST(Progress, JsonlLinesParseWithRequiredKeys) {
  const std::string path = temp_path("ok.jsonl");
  fs::remove(path);
  {
    MetricsWriter w(path, false);
    w.write(sample(1));
    // Flushed at once: readable before the writer closes.
    ASSERT_EQ(lines_of(path).size(), 1u);
    StepMetrics partial;  // unmeasured required fields become null
    partial.step = 2;
    partial.loss = 3.0;
    w.write(partial);
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  const auto j = nlohmann::json::parse(lines[0]);
  for (const char* key :
       {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu", "max_expert_load"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["step"], 1);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 5.4321);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 0.123);
  EXPECT_DOUBLE_EQ(j["mtp_loss"].get<double>(), 5.69);
  const auto j2 = nlohmann::json::parse(lines[1]);
  EXPECT_TRUE(j2["lr"].is_null());
  EXPECT_TRUE(j2["max_expert_load"].is_null());
  EXPECT_FALSE(j2.contains("mtp_loss"));
  fs::remove(path);
}

TEST(Progress, RefusesToOverwriteUnlessAsked) {
  const std::string path = temp_path("exists.jsonl");
  std::ofstream(path) << "precious\n";
  try {
    MetricsWriter w(path, false);
    FAIL() << "opened an existing metrics file without overwrite";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(lines_of(path), std::vector<std::string>{"precious"});
  {
    MetricsWriter w(path, MetricsWriter::Mode::kAppend);
    w.write(sample(3));
  }
  EXPECT_EQ(lines_of(path).size(), 2u);
  {
    MetricsWriter w(path, true);
    w.write(sample(4));
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["step"], 4);
  fs::remove(path);
  EXPECT_THROW(MetricsWriter("/nonexistent_dir_moet/x.jsonl", false), Error);
}
