// Progress line and JSONL metrics writer.
#include <gtest/gtest.h>
#include <unistd.h>

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
  m.min_expert_load = 0.61;
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
