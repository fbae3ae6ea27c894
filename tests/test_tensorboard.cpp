// TensorBoard event encoding (TFRecord framing, masked CRC-32C, protobuf Events) against bytes
// worked out by hand, the expert-load histogram, and `moet report`'s reader and page.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "metrics/report.h"
#include "metrics/tensorboard.h"
#include "train/run_info.h"

namespace fs = std::filesystem;
using namespace moet;

namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(char(x));
  return s;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("moet_tb_" + name + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(TensorBoard, MaskedCrcOfKnownBytes) {
  // CRC-32C("123456789") = 0xe3069283 (the standard check value), masked as TFRecord does.
  EXPECT_EQ(tensorboard::masked_crc32c("123456789", 9), 0xc78ab0e5u);
  EXPECT_EQ(tensorboard::masked_crc32c("", 0), 0xa282ead8u);
}

TEST(TensorBoard, RecordFraming) {
  const std::string rec = tensorboard::frame_record("");
  // u64 length 0, masked CRC of its 8 zero bytes (0x07980329), no data, masked CRC of nothing.
  EXPECT_EQ(rec, bytes({0, 0, 0, 0, 0, 0, 0, 0, 0x29, 0x03, 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2}));
  const std::string r2 = tensorboard::frame_record("123456789");
  ASSERT_EQ(r2.size(), 8u + 4 + 9 + 4);
  EXPECT_EQ(r2.substr(0, 8), bytes({9, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(r2.substr(12, 9), "123456789");
  EXPECT_EQ(r2.substr(21), bytes({0xe5, 0xb0, 0x8a, 0xc7}));
}

TEST(TensorBoard, FileVersionEvent) {
  // wall_time = 1 (fixed64 1.5), file_version = 3 ("brain.Event:2", 13 bytes)
  EXPECT_EQ(tensorboard::file_version_event(1.5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13}) + "brain.Event:2");
}

TEST(TensorBoard, ScalarEvent) {
  // Event{wall_time 2.0, step 3, summary{value{tag "a", simple_value 1.0f}}}
  EXPECT_EQ(tensorboard::scalars_event(2.0, 3, {{"a", 1.0f}}),
            bytes({0x09, 0,    0, 0,    0, 0,   0,    0, 0x40, 0x10, 3,   0x2a,
                   10,   0x0a, 8, 0x0a, 1, 'a', 0x15, 0, 0,    0x80, 0x3f}));
  // a step over 127 takes a two-byte varint
  const std::string e = tensorboard::scalars_event(0, 300, {});
  EXPECT_EQ(e.substr(9), bytes({0x10, 0xac, 0x02, 0x2a, 0}));
}

TEST(TensorBoard, SessionStartEvent) {
  // Event{wall_time 2.0, step 5, session_log = 7 {status = 1: START}}
  EXPECT_EQ(tensorboard::session_start_event(2.0, 5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10, 5, 0x3a, 2, 0x08, 1}));
}

TEST(TensorBoard, HistogramEvent) {
  const Histogram h = expert_load_histogram({3, 0, 5});
  EXPECT_EQ(h.num, 8);
  EXPECT_EQ(h.sum, 10);  // 3 x 0 + 5 x 2
  EXPECT_EQ(h.sum_squares, 20);
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 2);
  EXPECT_EQ(h.bucket, (std::vector<double>{3, 0, 5}));
  EXPECT_EQ(h.bucket_limit, (std::vector<double>{0.5, 1.5, 2.5}));
  const std::string e = tensorboard::histogram_event(0, 1, "h", h);
  // ... summary{value{tag "h", histo = 5 {5 doubles (45 bytes), 2 packed fields of 3 doubles}}}
  const std::string histo_len = bytes({45 + 2 * 26});
  EXPECT_NE(e.find(bytes({0x0a, 1, 'h', 0x2a}) + histo_len), std::string::npos);
  EXPECT_NE(e.find(bytes({0x3a, 24, 0, 0, 0, 0, 0, 0, 0x08, 0x40})), std::string::npos);  // 3.0
}

TEST(TensorBoard, ScalarsMirrorTheMetrics) {
  StepMetrics m;
  m.step = 4;
  m.lm_loss = 5.123456789;
  m.lr = 3e-4;
  m.tokens = 4096;
  m.expert_load_layers = {1, 3};
  m.expert_load = {{2, 6}, {0, 0}};
  const auto s = tensorboard_scalars(m);
  auto find = [&](const std::string& tag) -> const float* {
    for (const auto& [t, v] : s)
      if (t == tag) return &v;
    return nullptr;
  };
  ASSERT_TRUE(find("lm loss"));
  EXPECT_EQ(*find("lm loss"), float(5.123456789));
  EXPECT_EQ(*find("learning-rate"), float(3e-4));
  EXPECT_EQ(*find("consumed-tokens"), 4096.0f);
  EXPECT_FALSE(find("grad-norm"));  // not measured: left out
  ASSERT_TRUE(find("moe/expert_load_imbalance_layer_1"));
  EXPECT_EQ(*find("moe/expert_load_imbalance_layer_1"), 1.5f);
  EXPECT_FALSE(find("moe/expert_load_imbalance_layer_3"));  // no tokens: no ratio
  const auto j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j["expert_load"], nlohmann::json::parse("[[2,6],[0,0]]"));
  EXPECT_EQ(j["expert_load_layers"], nlohmann::json::parse("[1,3]"));
  EXPECT_EQ(j["expert_load_imbalance"][0].get<double>(), 1.5);
  EXPECT_TRUE(j["expert_load_imbalance"][1].is_null());
}

TEST(TensorBoard, WriterMakesOneEventFile) {
  const fs::path d = temp_dir("writer") / "tb";
  {
    TensorBoardWriter w(d.string());
    StepMetrics m;
    m.step = 1;
    m.loss = 2;
    w.write(m);
  }
  int files = 0;
  for (const auto& f : fs::directory_iterator(d)) {
    ++files;
    EXPECT_NE(f.path().filename().string().find("events.out.tfevents."), std::string::npos);
    std::ifstream in(f.path(), std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string first = tensorboard::file_version_event(0);  // the wall time differs
    ASSERT_GT(all.size(), 12 + first.size() + 4);
    EXPECT_EQ(all.substr(12 + 9, first.size() - 9), first.substr(9));
  }
  EXPECT_EQ(files, 1);
  fs::remove_all(d.parent_path());
}

TEST(TensorBoard, RefusesAFile) {
  const fs::path d = temp_dir("file");
  const fs::path f = d / "not_a_dir";
  std::ofstream(f) << "keep me";
  EXPECT_NE(test::error_of([&] { TensorBoardWriter w(f.string()); }).find("not a directory"),
            std::string::npos);
  std::ifstream in(f);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");
  fs::remove_all(d);
}

TEST(Report, ReadsWhatIsThereAndDrawsIt) {
  const fs::path d = temp_dir("report");
  const fs::path m = d / "metrics.jsonl";
  std::ofstream(m) << "{\"step\":1,\"loss\":5,\"lm_loss\":5,\"lr\":0.001,\"tokens\":64,"
                      "\"expert_load_layers\":[1],\"expert_load\":[[1,3]]}\n"
                      "{\"step\":2,\"loss\":4,\"lm_loss\":4,\"lr\":0.001,\"tokens\":128,"
                      "\"eval_loss\":4.5,\"expert_load_layers\":[1],\"expert_load\":[[2,2]]}\n"
                      "{\"step\":3,\"lo";  // a line still being written
  const auto records = read_metrics_records(m.string());
  ASSERT_EQ(records.size(), 2u);
  const std::string html = report_html(records, nlohmann::json{{"command", "moet train <x>"}}, "r");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("heatmap"), std::string::npos);
  EXPECT_NE(html.find("moet train &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("4.5000 (step 2)"), std::string::npos);
  fs::remove_all(d);
}

TEST(RunSummary, NamesTheFiles) {
  RunSummary s;
  s.steps = 10;
  s.tokens = 2560;
  s.seconds = 2;
  s.best_eval_loss = 3.25;
  s.best_eval_step = 10;
  s.metrics_path = "m.jsonl";
  s.tensorboard_dir = "tb";
  s.run_dir = "run";
  const std::string t = format_run_summary(s);
  EXPECT_NE(t.find("2560 tokens"), std::string::npos);
  EXPECT_NE(t.find("1280 tokens/s"), std::string::npos);
  EXPECT_NE(t.find("best held-out loss 3.2500 (step 10)"), std::string::npos);
  EXPECT_NE(t.find("tensorboard --logdir tb"), std::string::npos);
  EXPECT_NE(t.find("moet report run"), std::string::npos);
}
